"""``python -m datareel ...`` is the ``datareel`` command."""

import sys

from .cli import main

sys.exit(main())

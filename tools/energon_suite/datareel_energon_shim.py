"""pytest plugin: every ``megatron.energon[.X]`` import resolves to ``datareel.energon[.X]``.

Loaded by ``tools/energon_suite/run.py`` with ``-p datareel_energon_shim``.  It renames modules
and does nothing else: the module a test gets under ``megatron.energon.X`` is the very object
``import datareel.energon.X`` returns, so a name the facade lacks fails as it would for a user.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types

_PREFIX = "megatron.energon"
_TARGET = "datareel.energon"


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self._target = target

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        module = importlib.import_module(self._target)
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        # The target ran its own code already.  The import system stamped the alias spec on it;
        # give the module its own back, so ``datareel.energon.X`` still knows what it is.
        module.__spec__ = self._own_spec


class _Renamer(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):  # type: ignore[no-untyped-def]
        if name != _PREFIX and not name.startswith(_PREFIX + "."):
            return None
        real = _TARGET + name[len(_PREFIX) :]
        if importlib.util.find_spec(real) is None:
            return None  # ModuleNotFoundError, naming the module the test asked for
        spec = importlib.util.spec_from_loader(name, _Alias(real), is_package=True)
        return spec


def _install() -> None:
    for name in [n for n in sys.modules if n == _PREFIX or n.startswith(_PREFIX + ".")]:
        del sys.modules[name]
    if "megatron" not in sys.modules:
        # An empty namespace stands for the ``megatron`` package, so that the real one (if
        # installed) never runs: nothing of Energon's may execute through the shim.
        pkg = types.ModuleType("megatron")
        pkg.__path__ = []  # type: ignore[attr-defined]
        sys.modules["megatron"] = pkg
    sys.meta_path.insert(0, _Renamer())


_install()

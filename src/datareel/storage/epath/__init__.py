"""``EPath`` (:mod:`.epath`): Energon's path type on datareel's storage, what a record's ``dataset_path`` holds
(:mod:`datareel.sources.source_info`) and what ``datareel.energon.epathlib`` gives under Energon's module path.
Its names (:mod:`.names`), globs (:mod:`.glob`) and file objects on stores (:mod:`.io`) beside it."""

from .epath import EPath, dss_location
from .names import DEFAULT_PROFILE_NAME, path_url

__all__ = ["DEFAULT_PROFILE_NAME", "EPath", "dss_location", "path_url"]

"""Energon's ``megatron.energon.flavors.webdataset.config``: the names of a prepared dataset's metadata files,
by Energon's values (the format's facts; :mod:`datareel.formats.webdataset.meta` reads the same files)."""

import re

from ....formats.webdataset.meta import META

#: The metadata folder beside the shards.
MAIN_FOLDER_NAME = META
#: shard -> sample count (Energon's ``WebdatasetInfo``), and its legacy YAML twin.
INFO_JSON_FILENAME = ".info.json"
INFO_YAML_FILENAME = ".info.yaml"
#: the split config ``prepare`` writes by default (``split_config=`` names another).
SPLIT_YAML_FILENAME = "split.yaml"
#: the sample/part lookup index (sqlite) and the dataset's identity (a random UUID per indexing).
INDEX_SQLITE_FILENAME = "index.sqlite"
INDEX_UUID_FILENAME = "index.uuid"
#: a joined metadataset's join index, in the metadataset's cache folder.
JOIN_INDEX_FILENAME = "join_index.bin"
#: rows per batch Energon's indexer hands to its sqlite writer.
INDEX_BATCH_SIZE = 4096

#: a tar member name -> (sample key, part): the key runs to the first dot of the file name.
split_name_re = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
#: members named ``__...__`` (and what lies under such a folder) belong to no sample.
skip_meta_re = re.compile(r"__[^/]*__($|/)")

__all__ = [
    "INDEX_BATCH_SIZE",
    "INDEX_SQLITE_FILENAME",
    "INDEX_UUID_FILENAME",
    "INFO_JSON_FILENAME",
    "INFO_YAML_FILENAME",
    "JOIN_INDEX_FILENAME",
    "MAIN_FOLDER_NAME",
    "SPLIT_YAML_FILENAME",
    "skip_meta_re",
    "split_name_re",
]

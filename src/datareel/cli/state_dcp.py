"""Reading a ``torch.distributed.checkpoint`` directory for a loader state, running no code from it.

A DCP directory's ``.metadata`` is unpickled with an unpickler that admits only torch's DCP metadata
classes (:data:`DCP_METADATA_GLOBALS`), then checked (:func:`read_dcp_metadata`); its non-tensor
entries are loaded ``weights_only`` and tensors are neither read nor allocated (:func:`read_dcp`).
``trusted`` (``--trusted``) hands ``.metadata`` to torch's own unpickler instead.  A damaged checkpoint
is a :class:`~datareel.errors.StateDamagedError`; one naming other classes a
:class:`~datareel.errors.ForeignStateError`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ForeignStateError, StateDamagedError

MAX_PATH_PARTS = 64
"""Keys and list indices a DCP entry's path may have (as deep as a checkpoint is searched for a state)."""

UNREADABLE = "<not read: not plain data (weights_only)>"
"""What a DCP entry that is not plain data (a pickled object) is replaced with: never unpickled."""

DCP_METADATA_GLOBALS: dict[str, frozenset[str]] = {
    "torch.distributed.checkpoint.metadata": frozenset(
        {
            "Metadata",
            "StorageMeta",
            "MetadataIndex",
            "TensorStorageMetadata",
            "BytesStorageMetadata",
            "ChunkStorageMetadata",
            "TensorProperties",
            "_MEM_FORMAT_ENCODING",
        }
    ),
    "torch.distributed.checkpoint.filesystem": frozenset({"_StorageInfo"}),
    "torch": frozenset({"Size"}),  # and every torch dtype (torch.float32, ...)
    "torch.serialization": frozenset({"_get_layout"}),  # a layout by name (torch.strided)
    "pathlib": frozenset({"Path", "PosixPath", "WindowsPath", "PurePath", "PurePosixPath", "PureWindowsPath"}),
    "builtins": frozenset({"set", "frozenset"}),
    "collections": frozenset({"OrderedDict"}),
}
"""The globals a DCP ``.metadata`` may name (derived by unpickling real checkpoints written by torch 2.13:
a model's and an optimizer's state dicts, tensors of every dtype, scalars, nested plain entries and a
datareel loader). Classes are built with their own constructors and ``__setstate__``; nothing else runs."""

MAX_LIST_INDEX = 1 << 20
"""The largest list index a DCP entry's path may hold (each index below it is allocated when rebuilt)."""


def read_dcp_metadata(path: Path) -> Any:
    """``path/.metadata`` unpickled with :data:`DCP_METADATA_GLOBALS` only, then checked: every entry a
    tensor's or plain data's, every path a few keys and small list indices, every file one of the
    directory's own."""
    import pickle

    import torch
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata, TensorStorageMetadata

    shown = path / ".metadata"

    class MetadataUnpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if name in DCP_METADATA_GLOBALS.get(module, ()):
                return super().find_class(module, name)
            if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
                return getattr(torch, name)
            raise pickle.UnpicklingError(f"{module}.{name}")

    try:
        with open(shown, "rb") as f:
            metadata = MetadataUnpickler(f).load()
    except pickle.UnpicklingError as exc:
        raise ForeignStateError(
            f"{shown} names {exc}, which is not one of torch's DCP metadata classes, and datareel does not unpickle "
            f"other objects (unpickling runs code from the file). For a checkpoint you trust, pass --trusted"
        ) from None
    except Exception as exc:  # a damaged pickle: any error of the unpickler or of a class rebuilt
        raise StateDamagedError(f"{shown} cannot be read as DCP metadata: {type(exc).__name__}: {exc}") from None

    def damaged(what: str) -> StateDamagedError:
        return StateDamagedError(f"{shown}: {what}; the DCP checkpoint is damaged (or crafted)")

    if not isinstance(metadata, Metadata) or not isinstance(metadata.state_dict_metadata, dict):
        raise damaged(f"it holds a {type(metadata).__name__}, not torch's DCP Metadata")
    for key, entry in metadata.state_dict_metadata.items():
        if not isinstance(key, str) or not isinstance(entry, TensorStorageMetadata | BytesStorageMetadata):
            raise damaged(f"entry {key!r} is a {type(entry).__name__}, not a tensor's or plain data's metadata")
    planner_data = metadata.planner_data
    if planner_data is not None:
        if not isinstance(planner_data, dict):
            raise damaged(f"planner_data is a {type(planner_data).__name__}, not a dict")
        for key, where in planner_data.items():
            if not (
                isinstance(where, tuple | list)
                and 0 < len(where) <= MAX_PATH_PARTS
                and all(type(part) is str or (type(part) is int and 0 <= part <= MAX_LIST_INDEX) for part in where)
            ):
                raise damaged(f"entry {key!r} has the path {str(where)[:200]} (keys and list indices up to 2^20)")
    storage = metadata.storage_data
    if not isinstance(storage, dict):
        raise damaged(f"storage_data is a {type(storage).__name__}, not a dict")
    for info in storage.values():
        file = getattr(info, "relative_path", None)
        offset, length = getattr(info, "offset", None), getattr(info, "length", None)
        if not (isinstance(file, str) and file not in ("", ".", "..") and "/" not in file and "\\" not in file):
            raise damaged(f"an entry lies in {file!r}, not in a file of the checkpoint's directory")
        if not all(type(v) is int and v >= 0 for v in (offset, length)):
            raise damaged(f"an entry of {file!r} has offset {offset!r} and length {length!r}")
    return metadata


def read_dcp(path: Path, trusted: bool = False) -> Any:
    """The non-tensor entries of a DCP checkpoint, nested as saved, each loaded ``weights_only`` (an entry
    that is not plain data becomes :data:`UNREADABLE`); tensors are neither read nor allocated. The
    ``.metadata`` is read by :func:`read_dcp_metadata` (by torch's own unpickler if ``trusted``)."""
    import torch
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, StorageMeta
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    checked = None if trusted else read_dcp_metadata(path)

    class CheckedReader(FileSystemReader):  # type: ignore[misc]
        """torch's reader, with the metadata already read (and checked) by datareel."""

        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            if checked is None:
                return super().read_metadata(*args, **kwargs)
            if getattr(checked, "storage_meta", None) is None:
                checked.storage_meta = StorageMeta()
            checked.storage_meta.load_id = self.load_id
            return checked

    class PlainEntries(_EmptyStateDictLoadPlanner):  # type: ignore[misc]
        """torch's own planner for state dicts rebuilt from metadata, but DCP's non-tensor entries are
        unpickled with ``weights_only=False`` there (code from the file): here they are not. Only the
        plain entries named are rebuilt (torch's also takes entries under a prefix of a name: tensors)."""

        def _should_include_key(self, key: str, metadata: Any) -> bool:
            return key in self.keys

        def load_bytes(self, read_item: Any, value: Any) -> None:
            try:
                loaded = torch.load(value, weights_only=True)
            except Exception:
                loaded = UNREADABLE
            from torch.distributed.checkpoint._nested_dict import set_element

            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded)

    try:
        reader = CheckedReader(path)
        metadata = reader.read_metadata()
        plain = [k for k, v in metadata.state_dict_metadata.items() if isinstance(v, BytesStorageMetadata)]
        content: dict[str, Any] = {}
        _load_state_dict(content, storage_reader=reader, planner=PlainEntries(keys=set(plain)), no_dist=True)
    except (Exception, CheckpointException) as exc:  # torch's CheckpointException is a BaseException
        raise StateDamagedError(f"{path}: the DCP checkpoint cannot be read: {type(exc).__name__}: {exc}") from None
    return content

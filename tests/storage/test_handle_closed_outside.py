"""A handle in the open-shard set that was closed outside the set (``Handle.close()`` called directly) is not
read unpinned: :meth:`OpenShards.use` opens the shard afresh, and an opener that hands back a closed handle is
refused by name."""

from __future__ import annotations

import os

import numpy as np
import pytest

from datareel import StorageError
from datareel.storage.handles import Handle, OpenShards


def _opener(path, opened):
    def opener():
        handle = Handle(os.open(path, os.O_RDONLY), np.array([0, 4], dtype=np.uint64))
        opened.append(handle)
        return handle

    return opener


@pytest.mark.parametrize("capacity", [1, 4])
def test_a_handle_closed_outside_the_set_is_opened_afresh(tmp_path, capacity):
    path = tmp_path / "a.tar"
    path.write_bytes(b"abcdefgh")
    opened: list[Handle] = []
    shards = OpenShards(capacity)
    assert shards.pread(str(path), _opener(path, opened), 4, 0) == b"abcd"
    opened[0].close()  # outside the set: its descriptor is gone and its index is empty
    with shards.use(str(path), _opener(path, opened)) as handle:
        assert handle is opened[1] and handle.fd >= 0 and len(handle.index) == 2
        assert handle.read_range(4, 8) == b"efgh"
    assert shards.peek(str(path)) is opened[1] and len(shards) == 1
    assert shards.pread(str(path), _opener(path, opened), 4, 2) == b"cdef" and len(opened) == 2
    shards.close_all()


def test_an_opener_that_returns_a_closed_handle_is_refused_by_name(tmp_path):
    path = tmp_path / "a.tar"
    path.write_bytes(b"abcdefgh")
    shards = OpenShards(2)

    def closed():
        handle = Handle(os.open(path, os.O_RDONLY), np.array([0, 4], dtype=np.uint64))
        handle.close()
        return handle

    with pytest.raises(StorageError, match="returned a handle that is closed already"):
        with shards.use(str(path), closed):
            pass

"""The one walk over a metadataset's tree: every reader of a metadataset rides it.

:class:`Walk` reads each file once (its top level checked, the legacy v1 ``datasets`` list read as a
``blend``), finds a split's node, counts a tree before it is built (:data:`~..metafiles.MAX_NODES`), names
a cycle of files that include each other (a split that comes back), tells each node's kind (``path``,
``blend``, ``blend_epochized`` or ``join``), follows an entry naming another metadataset into that file's
split (``split_part``), and carries down what flows from outer entries to inner ones
(:class:`~.scope.Scope`): subflavors (outer over inner), ``shuffle_over_epochs_multiplier`` (as written, read
and combined where used: :meth:`~.scope.Scope.combined`) and ``subset`` ranges as written (innermost first;
each reader applies them with its own arithmetic).

What each reader makes of the nodes is its :class:`~.scope.Visitor`:

- the blend layer's builder (:mod:`datareel.blend.metadataset`): sources, mixes, concatenations, joins;
- ``datareel info`` (:mod:`.info`): the datasets each split names, lenient (``lenient=True`` skips what is
  malformed, which opening the metadataset names);
- the joins of one file (:func:`datareel.blend.join.file_joins`, ``follow=False``);
- Energon's objects of a metadataset (``datareel.energon.metadataset``: ``get_datasets``, ``traverse``,
  ``prepare``, the views of ``MetadatasetV2.splits``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, Generic, TypeVar

from ...errors import DatasetError
from ...storage import join
from ...storage.path import as_path
from ..metafiles import MAX_NODES, load_file
from .document import checked, legacy_split
from .scope import Scope, Visitor, Written

KINDS = ("path", "blend", "blend_epochized", "join")
"""The kinds of entry: the key that says what an entry is (exactly one of them per entry)."""
SUFFIXES = (".yaml", ".yml")

T = TypeVar("T")


def detect(path: Any) -> bool:
    """A ``.yaml`` / ``.yml`` file (by its name): a metadataset."""
    return as_path(str(path)).suffix in SUFFIXES


def beside(yaml_path: Any, path: str) -> Any:
    """``path`` from a metadataset at ``yaml_path``: relative to its directory (local or a URL); a URL or
    an absolute local path as it is, so local and remote datasets mix in one file."""
    return as_path(join(str(yaml_path.parent), path))


def file_key(path: Any) -> str:
    """What tells two files apart: the resolved path."""
    return str(as_path(str(path)).resolve())


def split_key(path: Any, split: str) -> str:
    """What a cycle repeats: a split of a file (a file may include another split of itself, or of a file that
    includes it: a tree, as long as no split comes back)."""
    return f"{file_key(path)} (split {split})"


class Walk(Generic[T]):
    """Walks metadataset trees for ``visitor``; ``follow``: into the metadatasets entries name;
    ``lenient``: a malformed node is skipped (``None``) rather than refused; ``place``: where an entry's
    ``path`` lies, from the file's path (default :func:`beside`; a facade keeps its own path type)."""

    def __init__(
        self,
        visitor: Visitor[T],
        *,
        follow: bool = True,
        lenient: bool = False,
        place: Callable[[Any, str], Any] = beside,
    ):
        self.visitor, self.follow, self.lenient, self.place = visitor, follow, lenient, place
        self.documents: dict[str, Any] = {}  # file -> its parsed, checked document (each read once)

    def document(self, path: Any) -> dict[str, Any]:
        """The checked top level of the metadataset at ``path`` (read and checked once)."""
        key = file_key(path)
        if key not in self.documents:
            loaded = load_file(as_path(str(path)), "metadataset", fix="fix the metadataset YAML")
            self.documents[key] = checked(loaded, path)
        return self.documents[key]

    def split_node(self, path: Any, split: str) -> Any:
        """The node of ``split`` in the metadataset at ``path`` (a legacy split as a ``blend``)."""
        config = self.document(path)
        splits = config["splits"]
        if split not in splits:
            raise DatasetError(f"{path}: split {split!r} is not defined; it defines {sorted(map(str, splits))}")
        node = splits[split]
        if config.get("__class__", "Metadataset") == "Metadataset":  # legacy v1: {datasets: [{weight, path}]}
            node = legacy_split(node, path, split, implicit="__class__" not in config)
        return node

    def count(self, path: Any, split: str, stack: tuple[str, ...] = (), memo: dict | None = None) -> int:
        """Blends and datasets the tree of ``split`` in ``path`` holds, includes expanded (memoised per file
        and split); raises past :data:`MAX_NODES`.  Malformed entries count as one."""
        memo = {} if memo is None else memo
        key, here = file_key(path), split_key(path, split)
        if (key, split) in memo or here in stack:
            return memo.get((key, split), 1)  # a cycle is named by the walk

        def walk(node: Any) -> int:
            if not isinstance(node, dict):
                return 1
            if isinstance(node.get("path"), str) and detect(node["path"]):
                inner = node.get("split_part") or split
                target = self.place(path, node["path"])
                return 1 + (self.count(target, inner, stack + (here,), memo) if isinstance(inner, str) else 0)
            items = node.get("blend", node.get("blend_epochized"))
            return 1 + (sum(walk(item) for item in items) if isinstance(items, list) else 0)

        try:
            node = self.split_node(path, split)
        except DatasetError:
            return 1  # named when the walk reaches it
        memo[(key, split)] = total = walk(node)
        if total > MAX_NODES:
            raise DatasetError(
                f"{path}: split {split!r} (with the metadatasets it includes) describes {total:,} blends and "
                f"datasets, more than {MAX_NODES:,} blends and datasets (the most one tree may hold); a metadataset "
                f"that includes another many times multiplies its entries. Reference each dataset once, with its "
                f"weight or repetitions"
            )
        return total

    def tree(self, path: Any, split: str, scope: Scope | None = None) -> T | None:
        """The split ``split`` of the metadataset at ``path`` (``scope``: what an outer entry gives it)."""
        scope = scope or Scope(yaml=path, where="", split=split)
        key = split_key(path, split)
        if key in scope.files:
            raise DatasetError(f"{path}: metadatasets include each other in a cycle: {list(scope.files)}")
        self.document(path)  # a file that does not read is named, also by a lenient walk
        try:
            node = self.split_node(path, split)
        except DatasetError:
            if self.lenient:
                return None
            raise
        if self.follow and not scope.files:  # the top file: refuse a tree too large before reading any of it
            self.count(path, split)
        inner = replace(scope, yaml=path, where=f"splits.{split}", split=split, parent=None, files=scope.files + (key,))
        return self.node(node, inner)

    def node(self, node: Any, scope: Scope) -> T | None:
        """One entry at ``scope`` (see the module doc)."""
        try:
            kind = self._kind(node, scope)
        except DatasetError:
            if self.lenient:
                return None
            raise
        try:
            scope = self._narrow(node, kind, scope)
        except DatasetError:
            if not self.lenient:
                raise  # a lenient walk reads on with the outer values
        if kind == "join":
            return self.visitor.join(node, scope)
        if kind == "path":
            path = node["path"]
            if not isinstance(path, str) or not path:
                if self.lenient:
                    return None
                raise DatasetError(f"{scope.place}.path={path!r} must be a non-empty string")
            target = self.place(scope.yaml, path)
            if not (self.follow and detect(target)):
                return self.visitor.dataset(node, target, scope)
            self.visitor.metadataset(node, target, scope)
            try:
                part = scope.part(node)
            except DatasetError:
                if not self.lenient:
                    raise
                part = scope.split  # a lenient walk reads on in the outer split
            return self.tree(target, part, scope)
        items = node[kind]
        if not isinstance(items, list):  # an empty one is the reader's to refuse (Energon loads it)
            if self.lenient:
                return None
            raise DatasetError(f"{scope.place}.{kind} must be a list, got {items!r:.80}")
        children = [
            self.node(item, replace(scope, where=f"{scope.where}.{kind}[{i}]", parent=kind))
            for i, item in enumerate(items)
        ]
        return self.visitor.blend(node, kind, children, scope)

    def _kind(self, node: Any, scope: Scope) -> str:
        if not isinstance(node, dict):
            raise DatasetError(f"{scope.place} must be a mapping, got {node!r:.80}")
        odd = [key for key in node if not isinstance(key, str)]
        if odd:
            raise DatasetError(f"{scope.place} has keys that are not strings: {odd[:5]}")
        self.visitor.enter(node, scope)
        if "join" in node:
            return "join"  # its own keys are the join's reader's to check (a 'path' beside it is named there)
        kinds = [k for k in KINDS if k in node]
        if len(kinds) != 1:
            raise DatasetError(
                f"{scope.place} needs exactly one of 'path', 'blend', 'blend_epochized', 'join'; got {sorted(node)}"
            )
        return kinds[0]

    def _narrow(self, node: dict, kind: str, scope: Scope) -> Scope:
        """``scope`` with the node's own subflavors, multiplier and subset applied."""
        own = node.get("subflavors")
        if own is not None and not isinstance(own, dict):
            raise DatasetError(f"{scope.place}.subflavors={own!r:.80} must be a mapping")
        multipliers = scope.multipliers
        if "shuffle_over_epochs_multiplier" in node:  # read where it is used (Energon loads any value)
            multipliers = multipliers + ((node["shuffle_over_epochs_multiplier"], scope.place),)
        subsets = scope.subsets
        if "subset" in node:
            subsets = (Written(node["subset"], scope.yaml, scope.where, kind in ("path", "join")),) + subsets
        subflavors = {**(own or {}), **scope.subflavors}  # the outer values win
        return replace(scope, subflavors=subflavors, multipliers=multipliers, subsets=subsets)

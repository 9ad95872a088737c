"""Reading the metadata files of a dataset (JSON and YAML: ``.info.json``, ``split.yaml``, ``dataset.yaml``,
metadatasets) as a stranger wrote them: safe loading only, bounded in size as written and as expanded,
a key given twice refused, and every other key checked against the ones a format takes
(:func:`datareel.errors.check_keys`, importable here too).  Nothing is executed from a dataset."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from ..errors import DatasetError, RepeatedKey
from ..sources.keys import _short as _short
from ..sources.keys import check_keys as check_keys


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's safe loader (~10x faster) where built, refusing a key repeated in a mapping (YAML keeps
    the last and drops the others without a word) unless the earlier value is empty (``[]``, ``{}``, null:
    nothing is dropped; Energon's own split files repeat ``exclude:`` so).  A merge key's (``<<: *base``)
    entries may be given again beside it: that is how YAML overrides them."""

    def flatten_mapping(self, node: yaml.MappingNode) -> None:  # each mapping's first step, before merging
        checked = self.__dict__.setdefault("_checked", set())
        if id(node) not in checked:
            checked.add(id(node))
            seen: dict[tuple[str, str], tuple[yaml.Node, yaml.Node]] = {}
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # a key that is not a string is refused later (_check_bounded)
                key = key_node.tag, key_node.value  # a string key: its text ('a' and "a" are one key)
                if key in seen:
                    first_key, first_value = seen[key]
                    if _empty(first_value):  # `exclude: []` then `exclude: [...]`: nothing is dropped, the later wins
                        node.value.remove((first_key, first_value))
                        seen[key] = key_node, value_node
                        continue
                    raise RepeatedKey(
                        self.construct_object(key_node),
                        self.construct_object(first_value, deep=True),
                        self.construct_object(value_node, deep=True),
                        key_node.start_mark.line + 1,
                        first_key.start_mark.line + 1,
                    )
                seen[key] = key_node, value_node
        super().flatten_mapping(node)


def _empty(node: yaml.Node) -> bool:
    """An empty list or mapping, or null: a value whose replacement by a repeated key loses nothing."""
    if isinstance(node, (yaml.SequenceNode, yaml.MappingNode)):
        return not node.value
    return node.tag == "tag:yaml.org,2002:null"


SAFE_LOADER = _Loader


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing a key given twice (``json`` keeps the last)."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: dict[str, Any] = {}
        for key, item in pairs:
            if key in seen:
                raise RepeatedKey(key, seen[key], item)
            seen[key] = item
    return value


MAX_NODES = 100_000  # values one metadata file may add through YAML aliases (each use counted)
MAX_DEPTH = 64  # nesting of one metadata file


def close_names(path: Any) -> str:
    """``"; did you mean ...?"`` naming entries beside a missing ``path`` whose names come close."""
    import difflib
    import itertools

    if not isinstance(path, Path):
        return ""  # a URL: listing the prefix costs requests
    try:
        siblings = [p.name for p in itertools.islice(path.parent.iterdir(), 10_000)] if path.parent.is_dir() else []
    except OSError:
        return ""
    close = difflib.get_close_matches(path.name, siblings, n=3)
    return f"; did you mean {' or '.join(str(path.parent / c) for c in close)}?" if close else ""


def load_file(path: Path, what: str = "", fix: str = "re-run `datareel prepare` on the dataset") -> Any:
    """A JSON or YAML metadata file (safe loading only), bounded in size as written and as expanded.
    Anything wrong with it (unreadable, not UTF-8, not JSON/YAML, an integer past Python's 4,300-digit
    conversion limit, nested past the parser's stack) is a :class:`DatasetError` naming it and ``fix``."""
    label = f"{what}{' ' if what else ''}{path}"
    try:
        text = path.read_text(encoding="utf-8")
    except DatasetError:
        raise
    except FileNotFoundError:
        raise DatasetError(f"{label} does not exist{close_names(path)}") from None
    except UnicodeDecodeError as exc:
        raise DatasetError(
            f"cannot read {label}: it is not UTF-8 text (byte {exc.start}: {exc.reason}); {fix}"
        ) from None
    except OSError as exc:
        raise DatasetError(f"cannot read {label}: {exc.strerror or exc}; {fix}") from None
    try:
        if path.suffix == ".json":
            value = json.loads(text, object_pairs_hook=_json_object)
        else:
            value = yaml.load(text, Loader=SAFE_LOADER)
    except RepeatedKey as exc:
        where = f" line {exc.line}: key {_short(exc.key)} appears twice (first on line {exc.first})"
        if exc.line is None:  # JSON: the parser gives no position
            where = f": key {_short(exc.key)} appears twice in one object"
        raise DatasetError(
            f"{label}{where}: {_short(exc.old)} and then {_short(exc.new)}; a mapping gives each key once (a "
            f"parser would keep the last and drop the other without a word): remove one"
        ) from None
    except RecursionError:
        raise DatasetError(f"cannot read {label}: it is nested too deeply to parse; {fix}") from None
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise DatasetError(f"cannot read {label}: {exc}; {fix}") from None
    except ValueError as exc:
        if "integer string conversion" in str(exc):
            raise DatasetError(
                f"cannot read {label}: it holds an integer of more than {sys.get_int_max_str_digits():,} digits, "
                f"which no count or setting needs; {fix}"
            ) from None
        raise DatasetError(f"cannot read {label}: {exc}; {fix}") from None
    except Exception as exc:  # a parser's own failure on hostile text: never a bare traceback
        raise DatasetError(f"cannot read {label}: {type(exc).__name__}: {exc}; {fix}") from None
    _check_bounded(value, path)
    return value


def _check_bounded(value: Any, path: Path) -> None:
    """Refuse a document whose YAML aliases expand beyond :data:`MAX_NODES` values, that nests deeper
    than :data:`MAX_DEPTH` levels, or that holds a mapping key that is not a string (every key of
    these formats is one).

    YAML anchors are shared, not copied, when loaded, but everything that walks the document visits an
    alias each time it is used: a few lines of anchors doubling at each line (a "billion laughs")
    describe millions of entries, and an anchor used inside itself describes an endless one.  Only
    values reached again through a container already seen are counted, so a long document written out
    in full (a split of 10^6 shards) is never refused for its size.
    """
    seen: set[int] = set()
    repeated = 0

    def visit(node: Any, depth: int, again: bool) -> None:
        nonlocal repeated
        if depth > MAX_DEPTH:
            raise DatasetError(
                f"{path} is nested more than {MAX_DEPTH} levels deep (an anchor used inside itself?); "
                f"metadata files are a few levels deep"
            )
        if not isinstance(node, (dict, list)):
            return
        if id(node) in seen:
            again = True
        seen.add(id(node))
        if again:
            repeated += len(node)
            if repeated > MAX_NODES:
                raise DatasetError(
                    f"{path} expands to more than {MAX_NODES:,} values through YAML aliases (each counted every "
                    f"time it is used): it is not a dataset description datareel will walk; write the entries "
                    f"out, or split the file"
                )
        if isinstance(node, dict):
            odd = [key for key in node if not isinstance(key, str)]
            if odd:
                raise DatasetError(
                    f"{path} has mapping keys that are not strings: {odd[:5]} (quote them in YAML: a bare yes, "
                    f"no, on, off or a number is not a string)"
                )
        for child in node.values() if isinstance(node, dict) else node:
            visit(child, depth + 1, again)

    visit(value, 0, False)


def unparsable(exc: BaseException) -> str:
    """Why ``json.loads`` failed with a bare ``RecursionError`` or ``ValueError`` (not a ``JSONDecodeError``)."""
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply to parse (arrays or objects inside each other past Python's stack)"
    if "integer string conversion" in str(exc):
        return (
            f"holds an integer of more than {sys.get_int_max_str_digits():,} digits, past Python's int conversion "
            f"limit (write it as a string)"
        )
    return f"not valid JSON: {exc}"

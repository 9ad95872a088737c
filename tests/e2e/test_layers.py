"""The layers of docs/architecture.md, checked on every import of ``src/datareel``.

The layers are data: the table under "## The layers" in docs/architecture.md, read here and nowhere else.
Its rows are the layers in order; the ``where`` column names each layer's modules in backticks, paths
relative to ``src/datareel`` (``plan/`` a package and everything under it, ``run.py`` one module).  A
module belongs to the layer of its most specific path (``sources/jsonl.py`` before ``sources/``), and
every module belongs to exactly one.  A module imports only from its own layer and the layers above it
in the table: the core never imports the facades and tools (``energon/``, ``cli/``, ``testing/``), the
last row; they may import the core.

Every import counts, as :mod:`test_imports` walks them: module level, under ``if TYPE_CHECKING:`` and in
function bodies.  Each violation is reported with the module, the line and the two layers.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import pytest
from test_imports import SRC, Import, module_imports, module_names

ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


class Layer(NamedTuple):
    name: str
    paths: tuple[str, ...]  # relative to the package: "plan/" (a package and below) or "run.py"


def read_layers(text: str) -> list[Layer]:
    """The rows of the table under ``## The layers``, in order: each layer's name and its paths."""
    section = text.partition("\n## The layers\n")[2].partition("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    if len(rows) < 3 or not re.fullmatch(r"\|(\s*-+\s*\|)+", rows[1].replace(" ", "")):
        raise ValueError("docs/architecture.md: no table of layers under '## The layers'")
    layers = []
    for row in rows[2:]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        paths = tuple(re.findall(r"`([^`]+)`", cells[1]))
        odd = [p for p in paths if not (p.endswith(("/", ".py")) and not p.startswith(("/", ".")))]
        if not paths or odd:
            raise ValueError(f"docs/architecture.md: layer {cells[0]!r} names no module paths, or not only: {odd}")
        layers.append(Layer(cells[0], paths))
    return layers


def assign(root: Path, layers: list[Layer]) -> dict[str, int]:
    """``{module: index of its layer}``; raises naming a module no layer claims, a path that names no module
    and a path two rows claim."""
    modules = {name: path.relative_to(root).as_posix() for name, path in module_names(root).items()}
    seen: dict[str, str] = {}
    for layer in layers:
        for path in layer.paths:
            if path in seen:
                raise ValueError(f"{path} is in layers {seen[path]!r} and {layer.name!r}")
            seen[path] = layer.name
    for path, name in seen.items():
        if not any(rel == path or (path.endswith("/") and rel.startswith(path)) for rel in modules.values()):
            raise ValueError(f"layer {name!r} names {path}, which holds no module of {root.name}")
    out, unclaimed = {}, []
    for name, rel in modules.items():
        claims = [
            (len(path), i)
            for i, layer in enumerate(layers)
            for path in layer.paths
            if rel == path or (path.endswith("/") and rel.startswith(path))
        ]
        if claims:
            out[name] = max(claims)[1]
        else:
            unclaimed.append(f"{name} ({rel})")
    if unclaimed:
        raise ValueError(f"modules in no layer (add their paths to a row of the table): {', '.join(unclaimed)}")
    return out


def violations(
    imports: dict[str, list[tuple[str, Import]]], layer_of: dict[str, int], layers: list[Layer]
) -> list[str]:
    """Each import statement that reaches a module of a later layer (naming the deepest such module)."""
    found: dict[tuple[str, int], str] = {}
    for module, edges in sorted(imports.items()):
        for target, where in sorted(edges, key=lambda edge: (edge[1].line, -len(edge[0]))):
            if layer_of[target] > layer_of[module] and (module, where.line) not in found:
                low, high = layers[layer_of[module]].name, layers[layer_of[target]].name
                found[(module, where.line)] = (
                    f"{module} ({where}) imports {target}: layer {low!r} may not import layer {high!r}, which comes "
                    f"after it"
                )
    return list(found.values())


def layer_violations(root: Path, text: str) -> list[str]:
    layers = read_layers(text)
    return violations(module_imports(root), assign(root, layers), layers)


def test_no_module_imports_a_later_layer():
    found = layer_violations(SRC, ARCHITECTURE.read_text())
    assert not found, "imports against docs/architecture.md's layers:\n  " + "\n  ".join(found)


def test_the_facades_come_last_and_the_core_never_imports_them():
    """The rule the table carries for the facades: they are its last row, and nothing before it."""
    layers = read_layers(ARCHITECTURE.read_text())
    assert set(layers[-1].paths) >= {"energon/", "cli/", "testing/"}
    assert not any(p.startswith(("energon/", "cli/", "testing/")) for layer in layers[:-1] for p in layer.paths)


TABLE = """# Architecture

## The layers

| layer | where | its one job |
|---|---|---|
| base | `errors.py`, `__init__.py` | errors; the package |
| storage | `storage/` | bytes |
| sources | `sources/` | samples |
| formats | `formats/`, `sources/old.py` | meaning; the old path of a reader |
| facades | `energon/` | Energon |

## Next
"""


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    pkg = tmp_path / "pkg"
    for rel, text in {"__init__.py": "", **files}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    return pkg


def test_the_walk_names_each_import_of_a_later_layer(tmp_path):
    """A core module importing the facade in a function body, one under ``TYPE_CHECKING``, an import of a
    later layer's package through its module, and what is allowed: a facade importing the core, a module
    of its own layer, an earlier layer, and a module the table places in a later layer by its own path."""
    pkg = _package(
        tmp_path,
        {
            "errors.py": "E = 1\n",
            "storage/__init__.py": "",
            "storage/files.py": (
                "from ..errors import E\n\n\ndef f():\n    from ..energon.paths import EPath\n\n"
                "    def g():\n        import pkg.energon\n"
            ),
            "sources/__init__.py": "",
            "sources/base.py": (
                "from typing import TYPE_CHECKING\n\nfrom ..storage import files\n\nif TYPE_CHECKING:\n"
                "    from ..formats.reader import Reader\n"
            ),
            "sources/old.py": "from ..formats.reader import Reader\n",
            "formats/__init__.py": "",
            "formats/reader.py": "from ..sources.base import files\nReader = 1\n",
            "energon/__init__.py": "",
            "energon/paths.py": "import pkg.storage.files\nEPath = 1\n",
        },
    )
    assert layer_violations(pkg, TABLE) == [
        "pkg.sources.base (line 6) imports pkg.formats.reader: layer 'sources' may not import layer 'formats', "
        "which comes after it",
        "pkg.storage.files (line 5, in a function) imports pkg.energon.paths: layer 'storage' may not import layer "
        "'facades', which comes after it",
        "pkg.storage.files (line 8, in a function) imports pkg.energon: layer 'storage' may not import layer "
        "'facades', which comes after it",
    ]


def test_every_module_has_one_layer_and_every_path_a_module(tmp_path):
    pkg = _package(tmp_path, {"errors.py": "", "storage/__init__.py": "", "lost.py": ""})
    layers = read_layers(TABLE.replace("`sources/`", "`sources/`, `storage/`").replace(", `sources/old.py`", ""))
    with pytest.raises(ValueError, match="storage/ is in layers 'storage' and 'sources'"):
        assign(pkg, layers)
    layers = [layer for layer in read_layers(TABLE) if layer.name in ("base", "storage")]
    with pytest.raises(ValueError, match=r"modules in no layer [^:]*: pkg.lost \(lost.py\)$"):
        assign(pkg, layers)
    layers.append(Layer("gone", ("gone/",)))
    with pytest.raises(ValueError, match="layer 'gone' names gone/, which holds no module of pkg"):
        assign(pkg, layers)
    with pytest.raises(ValueError, match="no table of layers"):
        read_layers("# Architecture\n\n## The layers\n\nprose only\n")

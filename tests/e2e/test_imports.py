"""No import cycle in ``src/datareel``: a walk of every module's imports with ``ast``, nothing imported.

An edge ``a -> b`` is an import of module ``b`` of the package that ``a`` makes: at module level, inside
module-level ``if`` / ``try`` / ``with`` blocks and class bodies, under ``if TYPE_CHECKING:`` too (a cycle
there is still two modules that need each other, and it breaks as soon as someone drops the guard), and
inside function bodies (a deferred import that closes a cycle hides it until the function is called, and
hides a dependency from the reader: two modules that need each other are one module split in two).  An
optional third-party dependency may still be imported inside a function; the walk counts only datareel's
own modules.  ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``.
Importing ``a.b.c`` is also an edge to the packages ``a`` and ``a.b`` (Python runs their ``__init__``
first, and one that imports back makes a cycle), except the importer's own packages, which are already
being imported.  ``tests/e2e/test_layers.py`` checks the same edges against the layers of
docs/architecture.md.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import deque
from pathlib import Path
from typing import NamedTuple

import pytest

import datareel

SRC = Path(datareel.__file__).resolve().parent


def module_names(root: Path) -> dict[str, Path]:
    """Every module under the package directory ``root``, by dotted name (``root.name`` first)."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


class Import(NamedTuple):
    """Where module ``a`` imports ``b``: the line, and whether the import runs in a function body (deferred)."""

    line: int
    deferred: bool = False

    def __str__(self) -> str:
        return f"line {self.line}" + (", in a function" if self.deferred else "")


Graph = dict[str, dict[str, Import]]


def module_imports(root: Path) -> dict[str, list[tuple[str, Import]]]:
    """``{module: [(imported module, import), ...]}`` within the package at ``root``: every import statement,
    in the order of the file (an import of ``a.b.c`` gives ``a.b`` and ``a.b.c``: see the module doc)."""
    modules = module_names(root)
    found: dict[str, list[tuple[str, Import]]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: list[tuple[str, Import]] = []

        def add(target: str, where: Import, edges: list[tuple[str, Import]] = edges, name: str = name) -> None:
            # importing a.b.c first runs a/__init__ and a/b/__init__: edges to those packages too, except the
            # importer's own packages (already being imported when it runs, so Python does not run them again)
            parts = target.split(".")
            for cut in range(1, len(parts) + 1):
                step = ".".join(parts[:cut])
                if step in modules and step != name and not name.startswith(step + "."):
                    edges.append((step, where))

        def walk(body: list[ast.stmt], deferred: bool, package: str = package, add=add) -> None:
            for node in body:
                if isinstance(node, ast.Import):
                    for alias in node.names:
                        target = alias.name
                        while target and target not in modules:  # `import a.b.c` of a module inside the package
                            target = target.rpartition(".")[0]
                        if target:
                            add(target, Import(node.lineno, deferred))
                elif isinstance(node, ast.ImportFrom):
                    if node.level:
                        base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                        source = ".".join(base + ([node.module] if node.module else []))
                    else:
                        source = node.module or ""
                    for alias in node.names:
                        if f"{source}.{alias.name}" in modules:
                            add(f"{source}.{alias.name}", Import(node.lineno, deferred))
                        elif source in modules:
                            add(source, Import(node.lineno, deferred))
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    walk(node.body, True)  # runs when called: deferred, and counted all the same
                else:  # if (TYPE_CHECKING too), try/except/else/finally, with, match, class bodies, ...
                    for field in ("body", "orelse", "finalbody"):
                        walk(getattr(node, field, None) or [], deferred)
                    for inner in (getattr(node, "handlers", None) or []) + (getattr(node, "cases", None) or []):
                        walk(inner.body, deferred)

        walk(ast.parse(path.read_text(), str(path)).body, False)
        found[name] = edges
    return found


def import_graph(root: Path) -> Graph:
    """``{module: {imported module: its first import}}`` within the package at ``root``: a module-level
    import before a deferred one of the same module, then the first line."""
    graph: Graph = {}
    for name, edges in module_imports(root).items():
        first: dict[str, Import] = {}
        for target, where in sorted(edges, key=lambda edge: (edge[1].deferred, edge[1].line)):
            first.setdefault(target, where)
        graph[name] = first
    return graph


def strongly_connected(graph: Graph) -> list[list[str]]:
    """The components of ``graph`` with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, {})))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def one_cycle(graph: Graph, component: list[str]) -> str:
    """A shortest cycle through the first module of ``component``, each import with its line, and the
    component's other modules when there are more."""
    first, members = component[0], set(component)
    came_from: dict[str, str] = {}
    queue = deque([first])
    while queue:
        node = queue.popleft()
        for target in sorted(graph[node]):
            if target == first:
                hops = [node]
                while hops[-1] != first:
                    hops.append(came_from[hops[-1]])
                hops = [*reversed(hops), first]
                text = " -> ".join(f"{a} ({graph[a][b]})" for a, b in zip(hops, hops[1:])) + f" -> {first}"
                rest = sorted(members - set(hops))
                return text + (f" (and in the same knot: {', '.join(rest)})" if rest else "")
            if target in members and target not in came_from:
                came_from[target] = node
                queue.append(target)
    raise AssertionError(f"internal: no cycle through {first} in {component}")


def cycles(root: Path) -> list[str]:
    graph = import_graph(root)
    return [one_cycle(graph, component) for component in strongly_connected(graph)]


def test_no_import_cycle_in_src():
    found = cycles(SRC)
    assert not found, "import cycles (module (line of its import) -> ...):\n  " + "\n  ".join(found)


def test_the_walk_counts_imports_in_function_bodies(tmp_path):
    """A deferred import (in a function, a method, a nested function, under ``try`` in a function) closes a
    cycle like any other (as ``storage.registry`` -> ``storage.remote`` -> ``storage.registry`` once did),
    and the cycle names it as deferred; a module-level import of the same module is the one named."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "registry.py").write_text("def remote():\n    from .remote import R\n\n    return R\n")
    (pkg / "remote.py").write_text("from .registry import remote\nR = 1\n")
    (pkg / "joined.py").write_text(
        "class J:\n    def join(self):\n        def inner():\n            try:\n"
        "                from . import typed\n            except ImportError:\n                pass\n"
    )
    (pkg / "typed.py").write_text("def base():\n    from .joined import J\n\n    return J\n")
    (pkg / "both.py").write_text("def f():\n    from . import other\n\n\nfrom . import other\n")
    (pkg / "other.py").write_text("def g():\n    from . import both\n")
    assert cycles(pkg) == [
        "pkg.both (line 5) -> pkg.other (line 2, in a function) -> pkg.both",
        "pkg.joined (line 5, in a function) -> pkg.typed (line 2, in a function) -> pkg.joined",
        "pkg.registry (line 2, in a function) -> pkg.remote (line 1) -> pkg.registry",
    ]


def test_the_walk_finds_a_cycle_and_names_it(tmp_path):
    """A package with a cycle only under ``TYPE_CHECKING`` (as loader <-> groups was), one through a
    relative ``from . import``, and a lazy import inside a function that is no cycle."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .c import C\n")
    (pkg / "loader.py").write_text("from .groups import global_batches\n")
    (pkg / "groups.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from .loader import Loader\n"
    )
    (pkg / "sub" / "c.py").write_text("from .. import d\nC = 1\n")
    (pkg / "d.py").write_text("import pkg.sub\n")
    (pkg / "lazy.py").write_text("import pkg.loader\n")
    (pkg / "e.py").write_text("def f():\n    from . import lazy\n")
    (pkg / "lazy2.py").write_text("from . import e\n")
    found = cycles(pkg)
    assert found == [
        "pkg.d (line 1) -> pkg.sub (line 1) -> pkg.sub.c (line 1) -> pkg.d",
        "pkg.groups (line 4) -> pkg.loader (line 1) -> pkg.groups",
    ]


def test_the_walk_sees_a_cycle_through_a_package_init(tmp_path):
    """``from pkg.sub.c import C`` runs ``pkg/sub/__init__`` first: when that imports back, it is a cycle
    (the knot formats <-> sources once was: a format's reader importing ``sources.base`` ran
    ``sources/__init__``, which imported the half-imported reader)."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "run.py").write_text("from pkg.sub.c import C\nR = 1\n")
    (pkg / "sub" / "__init__.py").write_text("from ..run import R\n")
    (pkg / "sub" / "c.py").write_text("from . import d\nC = 1\n")  # its own package: no edge back
    (pkg / "sub" / "d.py").write_text("D = 1\n")
    assert cycles(pkg) == ["pkg.run (line 1) -> pkg.sub (line 1) -> pkg.run"]


_FIRST = sorted(  # the modules that define the sources a worker unpickles, and what they stand on
    n
    for n in module_names(SRC)
    if n.split(".")[1:2] == ["sources"] or n.endswith((".reader", ".shards")) or n == "datareel.storage"
)


@pytest.mark.slow
def test_every_reader_module_imports_first_in_a_fresh_process():
    """What a spawned worker does when it unpickles a source: import the source's module before anything
    else of datareel. One fresh process per module (a walk can miss what only running finds), forked from an
    interpreter that imported torch and numpy, as a spawned worker has before it unpickles its dataset, and
    nothing of datareel (checked): each costs milliseconds, not an interpreter's torch import."""
    script = (
        "import importlib, os, sys, traceback\n"
        "import numpy, torch\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'datareel'], 'datareel imported before the fork'\n"
        "bad = []\n"
        "for name in sys.argv[1:]:\n"
        "    read, write = os.pipe()\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        os.close(read)\n"
        "        try:\n"
        "            importlib.import_module(name)\n"
        "            code = 0\n"
        "        except BaseException:\n"
        "            os.write(write, traceback.format_exc().strip().splitlines()[-1].encode())\n"
        "            code = 1\n"
        "        os._exit(code)\n"
        "    os.close(write)\n"
        "    with os.fdopen(read, 'rb') as pipe:\n"
        "        said = pipe.read().decode()\n"
        "    if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]):\n"
        "        bad.append(f'{name}: {said}')\n"
        "print('\\n'.join(bad))\n"
    )
    result = subprocess.run([sys.executable, "-c", script, *_FIRST], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert not result.stdout.strip(), "modules that fail when imported first:\n" + result.stdout

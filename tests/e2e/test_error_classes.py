"""Every exception class lives in ``datareel/errors.py``, and no saved-state problem is a bare ``DatareelError``.

Both are read from the source with ``ast`` (nothing is imported): a class anywhere in ``src/datareel``
whose base is an exception (a built-in one, one of ``errors.py``, or a name that ends like one) must be
defined in ``errors.py``; a ``DatareelError(...)`` built outside ``errors.py`` whose message speaks of a
state, a checkpoint or something saved must be one of the ``StateError`` kinds instead
(``StateMismatchError``, ``StateDamagedError``, ``ForeignStateError``, ...).  :data:`PENDING` lists the
files whose owners have yet to change theirs: a new one anywhere fails, and so does an entry that is stale.
"""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

import datareel

SRC = Path(datareel.__file__).resolve().parent
ERRORS = SRC / "errors.py"
EXCEPTION_ENDINGS = ("Error", "Exception", "Exit", "Interrupt", "Warning")
STATE_WORDS = re.compile(r"\b(states?|checkpoints?|saved)\b", re.IGNORECASE)

PENDING: dict[str, int] = {}
"""``path (under src/datareel) -> bare DatareelError(...)`` calls about a state its owner has yet to change
(none left: cli/verify.py's were the last)."""


def _modules() -> list[tuple[str, ast.Module]]:
    return [(str(path.relative_to(SRC)), ast.parse(path.read_text(), str(path))) for path in sorted(SRC.rglob("*.py"))]


def _name(node: ast.expr) -> str | None:
    """The last name of a base or a called function: ``Error``, ``errors.Error``, ``Generic[T]`` -> ``Generic``."""
    if isinstance(node, ast.Subscript):
        return _name(node.value)
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _builtin_exceptions() -> set[str]:
    return {n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}


def exception_classes_outside_errors() -> list[str]:
    """``path:line Class(Base)`` for each exception class defined outside ``errors.py``."""
    modules = _modules()
    known = _builtin_exceptions() | {
        node.name for node in ast.walk(ast.parse(ERRORS.read_text())) if isinstance(node, ast.ClassDef)
    }
    classes = [(path, node) for path, tree in modules for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]

    def is_exception(name: str | None) -> bool:
        return name is not None and (name in known or name.endswith(EXCEPTION_ENDINGS))

    grown = True
    while grown:  # a class deriving from an exception class found outside errors.py is one too
        grown = False
        for _, node in classes:
            if node.name not in known and any(is_exception(_name(base)) for base in node.bases):
                known.add(node.name)
                grown = True
    return [
        f"{path}:{node.lineno} {node.name}({', '.join(filter(None, map(_name, node.bases)))})"
        for path, node in classes
        if path != "errors.py" and any(is_exception(_name(base)) for base in node.bases)
    ]


def _text(node: ast.AST) -> str:
    """Every string constant in an expression (an f-string's literal parts, concatenations), joined."""
    return " ".join(n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str))


def bare_state_errors() -> dict[str, list[str]]:
    """``path -> ["line: message", ...]`` of each ``DatareelError(...)`` outside ``errors.py`` whose message
    speaks of a state."""
    found: dict[str, list[str]] = {}
    for path, tree in _modules():
        if path == "errors.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _name(node.func) == "DatareelError" and node.args:
                message = _text(node.args[0])
                if STATE_WORDS.search(message):
                    found.setdefault(path, []).append(f"{node.lineno}: {message[:100]}")
    return found


def test_every_exception_class_is_defined_in_errors_py():
    outside = exception_classes_outside_errors()
    assert not outside, f"define these in src/datareel/errors.py (and import them where they were): {outside}"


def test_no_bare_datareel_error_for_a_state_problem():
    found = bare_state_errors()
    new = {path: lines for path, lines in found.items() if len(lines) > PENDING.get(path, 0)}
    assert not new, (
        f"a saved-state problem raises a StateError kind (StateMismatchError, StateDamagedError, "
        f"ForeignStateError), not a bare DatareelError: {new}"
    )
    stale = {
        path: (count, len(found.get(path, []))) for path, count in PENDING.items() if len(found.get(path, [])) < count
    }
    assert not stale, f"PENDING allows more than is left (allowed, found); lower or remove these entries: {stale}"


def test_the_checks_find_what_they_look_for():
    """Each check, run on a module that breaks it, finds it (the tests above can fail)."""
    tree = ast.parse(
        "class Stale(ValueError): ...\nclass Worse(Stale): ...\n"
        "def f():\n    raise DatareelError(f'the saved {x} state is damaged')\n"
    )
    classes = [node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    assert classes == ["Stale", "Worse"] and _name(tree.body[0].bases[0]) in _builtin_exceptions()
    call = next(node for node in ast.walk(tree) if isinstance(node, ast.Call))
    assert _name(call.func) == "DatareelError" and STATE_WORDS.search(_text(call.args[0]))
    assert not STATE_WORDS.search("a stateless worker; statement")

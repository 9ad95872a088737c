"""What worker (or planning) processes can be sent: under ``spawn`` / ``forkserver`` each one starts fresh and
pickles what it runs, so what does not pickle is refused when the loader is built, naming the object
(:func:`check_picklable`); :func:`start_method` reads the start method a context gives."""

from __future__ import annotations

import multiprocessing
from multiprocessing.reduction import ForkingPickler
from typing import Any

from ..errors import OptionError


def start_method(context: Any) -> str:
    """The start method worker processes get: ``context`` (a name, a multiprocessing context or ``None``:
    the process's default, read without fixing it)."""
    if context is None:
        return multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
    if isinstance(context, str):
        return context
    return str(context.get_start_method())


def check_picklable(whole: Any, parts: list[tuple[str, Any]], context: Any) -> None:
    """Under the ``spawn`` or ``forkserver`` start method, refuse now, before any process starts, what the
    worker (or planning) processes could not be sent: ``whole`` is what they receive, ``parts`` the
    user's objects inside it, named (``task_encoder``, ``error_handler``, each dataset source), checked
    first so the message names the one at fault.  ``fork`` copies the process and pickles nothing."""
    method = start_method(context)
    if method == "fork":
        return
    for name, obj in [*parts, ("the loader's worker state", whole)]:
        found = _unpicklable(obj, name, depth=0)
        if found is not None:
            raise OptionError(_unpicklable_message(*found, method))


def _pickle_error(obj: Any) -> BaseException | None:
    try:
        ForkingPickler.dumps(obj)
    except Exception as exc:  # AttributeError (a local class), PicklingError, TypeError (a lock, a file), ...
        return exc
    return None


def _unpicklable(obj: Any, path: str, depth: int) -> tuple[str, Any, BaseException] | None:
    """``(path, object, error)`` of the innermost attribute or item of ``obj`` that does not pickle (a few
    levels deep), or ``None`` if ``obj`` pickles."""
    error = _pickle_error(obj)
    if error is None:
        return None
    if depth < 4 and not isinstance(obj, type):
        if isinstance(obj, dict):
            items = [(f"{path}[{k!r}]", v) for k, v in list(obj.items())[:64]]
        elif isinstance(obj, (list, tuple)):
            items = [(f"{path}[{i}]", v) for i, v in enumerate(obj[:64])]
        else:
            items = [(f"{path}.{k}", v) for k, v in list(getattr(obj, "__dict__", {}).items())[:64]]
        for inner_path, inner in items:
            found = _unpicklable(inner, inner_path, depth + 1)
            if found is not None:
                return found
    return path, obj, error


def _unpicklable_message(path: str, obj: Any, error: BaseException, method: str) -> str:
    kind = obj if isinstance(obj, type) or callable(obj) and hasattr(obj, "__qualname__") else type(obj)
    qualname = getattr(kind, "__qualname__", type(obj).__qualname__)
    what = f"{getattr(kind, '__module__', '?')}.{qualname}"
    head = (
        f"{path} ({what}) cannot be sent to the loader's worker processes: multiprocessing_context={method!r} "
        f"starts each one fresh and pickles what it runs, classes and functions by reference (module and name)"
    )
    if "<locals>" in qualname or "<lambda>" in qualname:
        local = "a lambda" if "<lambda>" in qualname else "a class or function defined inside a function"
        return (
            f"{head}, and {local} ({qualname!r}) cannot be found that way ({type(error).__name__}: {error}); "
            f"define it at module level (outside any function), or use multiprocessing_context='fork'"
        )
    return (
        f"{head}, and this object does not pickle ({type(error).__name__}: {error}); make it picklable "
        f"(module-level classes and functions; no lambdas, open files, locks or generators), or use "
        f"multiprocessing_context='fork'"
    )

"""Glob patterns and folder walks for :class:`~.epath.EPath`: a pattern as a matcher of relative paths
(``*``, ``?``, ``[...]`` inside one name, ``**`` for any number of folders), and a local walk that follows
links to folders, as Energon's does."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator


def _segment(part: str) -> str:
    """A regex for one path segment of a glob pattern."""
    out, i = [], 0
    while i < len(part):
        char = part[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = part.find("]", i + 2 if part[i + 1 : i + 2] in ("!", "^") else i + 1)
            if end < 0:
                out.append(re.escape(char))
            else:
                body = part[i + 1 : end]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append(f"[{body.replace(chr(92), chr(92) * 2)}]")
                i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def matcher(pattern: str) -> Callable[[str], bool]:
    """Whether a relative path (``a/b/c.txt``) matches ``pattern``."""
    parts = [p for p in pattern.strip("/").split("/") if p not in ("", ".")]
    regex = ""
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            regex += ".*" if last else "(?:[^/]+/)*"
        else:
            regex += _segment(part) + ("" if last else "/")
    compiled = re.compile(f"^{regex}$")
    return lambda rel: compiled.match(rel) is not None


def walk_local(root: str) -> Iterator[str]:
    """Paths (relative to ``root``) of the files under it, links to folders followed."""
    root = root.rstrip("/") or "/"
    for folder, _, files in os.walk(root, followlinks=True):
        rel = os.path.relpath(folder, root)
        for name in files:
            yield name if rel == "." else f"{rel}/{name}"

"""JSON values compared as a shadow's comparison compares them (`router.shadow`), in Python:
the tests' oracle."""

from __future__ import annotations

from typing import Any


def same(a: Any, b: Any) -> bool:
    """JSON values equal: numbers by value, booleans apart from numbers, objects whatever their
    fields' order."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b

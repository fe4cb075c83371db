"""`like` without backtracking: O(len(text) * len(pattern)) whatever the pattern.

A regular expression for `%a%a%a%b` backtracks over every way of placing the `a`s, so its cost
grows as a power of the text's length. With `%` the only variable-length wildcard there is no
need to: split the pattern on `%` into segments of literal characters and `_` (one character);
the first must match at the start, the last at the end, and each one between at its leftmost
place after the one before (any match further right only leaves less room for the rest). The
segments between are tried at each position of the text at most once in all, so a match costs
O(len(text) * len(pattern)) character comparisons. Characters are code points, so `_` matches
one, astral ones included. router/java/LikeMatcher.java is the same algorithm, for the router.
"""

from __future__ import annotations

from functools import lru_cache

# A segment: literal characters, with None for `_` (any one character).
Segment = tuple[str | None, ...]


@lru_cache(maxsize=1024)
def segments(pattern: str) -> tuple[Segment, ...]:
    """The pattern split on `%`; a backslash escapes %, _ or a backslash (the parser allows no
    other)."""
    parts: list[Segment] = []
    current: list[str | None] = []
    chars = iter(pattern)
    for ch in chars:
        if ch == "\\":
            current.append(next(chars))
        elif ch == "%":
            parts.append(tuple(current))
            current = []
        else:
            current.append(None if ch == "_" else ch)
    parts.append(tuple(current))
    return tuple(parts)


def matches(pattern: str, text: str) -> bool:
    return _match(segments(pattern), text)[0]


def comparisons(pattern: str, text: str) -> int:
    """How many characters matching `text` compares: what the cost bound is about."""
    return _match(segments(pattern), text)[1]


def _match(parts: tuple[Segment, ...], text: str) -> tuple[bool, int]:
    """Whether `text` matches, and the characters compared to find out."""
    steps = 0

    def fits(segment: Segment, at: int) -> bool:
        nonlocal steps
        for offset, want in enumerate(segment):
            steps += 1
            if want is not None and text[at + offset] != want:
                return False
        return True

    first, last = parts[0], parts[-1]
    if len(parts) == 1:  # no `%`: the whole text, character by character
        return len(text) == len(first) and fits(first, 0), steps
    end = len(text) - len(last)  # where the last segment must start
    if len(first) > end or not fits(first, 0) or not fits(last, end):
        return False, steps
    at = len(first)
    for segment in parts[1:-1]:
        while at + len(segment) <= end and not fits(segment, at):
            at += 1
        if at + len(segment) > end:
            return False, steps
        at += len(segment)
    return True, steps

"""The commands' tables fold instead of cutting, at any width, and every table and console of the
package comes from `keystone.terminal` (one made elsewhere would cut at 80 columns again)."""

from __future__ import annotations

import ast
import io
from pathlib import Path

from rich.console import Console

import keystone
from keystone import terminal

TOPIC = "keystone.demo.errors_once.dead-letters"


def test_a_narrow_table_keeps_every_character() -> None:
    table = terminal.table("output", "where", "duplicates")
    table.add_row("errors_once", TOPIC, "0")
    for width in (30, 50, 80):
        out = io.StringIO()
        Console(file=out, width=width).print(table)
        text = out.getvalue()
        assert "…" not in text
        assert all(len(line) <= width for line in text.splitlines())
        cells = "".join(line.split("│")[2].strip() for line in text.splitlines() if "│" in line)
        assert TOPIC in cells, text  # the folded cell, read top to bottom


def test_tables_and_consoles_are_made_in_one_place() -> None:
    package = Path(keystone.__file__).parent
    elsewhere = []
    for path in package.rglob("*.py"):
        if path.name == "terminal.py" and path.parent == package:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            called = isinstance(node, ast.Call) and getattr(node.func, "id", None)
            if called in {"Table", "Console"} and not _to_stderr(node):
                elsewhere.append(f"{path.relative_to(package)}:{node.lineno} {called}()")
    assert elsewhere == []


def _to_stderr(call: ast.Call) -> bool:
    """A console of progress on stderr (`--json` keeps stdout to the figures) is its own."""
    return any(k.arg == "stderr" for k in call.keywords)

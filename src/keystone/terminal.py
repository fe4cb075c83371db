"""What the project's commands print: one console, and tables whose cells wrap instead of being
cut. Rich takes a pipe or a CI log for 80 columns, and a cut cell ("errors_…", "keyston…") says
nothing; a folded one keeps every character, whatever the width. `--json` stays the machine's
way: the tables are for people.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

console = Console()


def table(*headers: str, **options: Any) -> Table:
    """A table whose columns fold (break anywhere, losing nothing) when the width is short."""
    made = Table(**options)
    for header in headers:
        made.add_column(header, overflow="fold")
    return made

"""Looking at processes from tests: alive or not, and what is left in a process group."""

from __future__ import annotations

from pathlib import Path

from keystone.contracts.processes import stat_fields


def alive(pid: int) -> bool:
    """Running, not merely a zombie left for its parent to reap (it has ended)."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def groups_alive(leaders: list[int]) -> list[int]:
    """Live processes in the process groups these leaders started (children like uvicorn's
    workers or a router's JVM included, whose command lines may mention nothing of the stack)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        fields = stat_fields(entry.name)
        if fields is not None and fields[0] != "Z" and int(fields[2]) in leaders:
            found.append(int(entry.name))
    return found


def processes_mentioning(text: str) -> list[int]:
    """Pids whose command line mentions `text` (a state directory, say)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue  # the process ended while we looked
    return found

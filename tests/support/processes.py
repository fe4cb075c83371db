"""Looking at processes from tests: alive or not, and what is left in a process group."""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path

from keystone.contracts.processes import stat_fields
from keystone.loadtest.bench import process_tree


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


def processes_mentioning(text: str, but: Collection[int] = ()) -> dict[int, str]:
    """Processes whose command line mentions `text` (a state directory, say), but those in
    `but`: each one's command line."""
    found = {}
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes()
        except OSError:
            continue  # the process ended while we looked
        pid = int(cmdline.parent.name)
        if text.encode() in line and pid not in but:
            found[pid] = line.replace(b"\0", b" ").decode(errors="replace")[:300]
    return found


def this_runs_own() -> set[int]:
    """The test run's own processes: pytest's (the controller and every worker, under xdist)
    and those they started and still run, such as another module's Spark reader of Hive
    tables, whose command line names the stack's state directory but which the stack did not
    start (the stack's services are started on their own, outside this tree)."""
    root = os.getppid() if "PYTEST_XDIST_WORKER" in os.environ else os.getpid()
    return set(process_tree(root))

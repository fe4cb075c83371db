"""Where a secret of the stack was written that it must never be: a log file of the stack, or
the argument list of one of its processes."""

from __future__ import annotations

from pathlib import Path

from tests.support.stack import Stack


def stack_processes(state_dir: Path) -> list[int]:
    """Every process whose command line or environment names the stack's state directory."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            seen = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
        except OSError:
            continue
        if str(state_dir).encode() in seen:
            found.append(int(entry.name))
    return found


def leaks(stack: Stack, secrets: dict[str, str]) -> list[str]:
    """Each place that holds one of the named secrets: '<log file> holds <names>' or
    'process <pid>'s arguments hold <names>'."""
    found = []
    for path in (p for p in stack.settings.logs_dir.rglob("*") if p.is_file()):
        text = path.read_text(errors="replace")
        if held := [name for name, secret in secrets.items() if secret in text]:
            found.append(f"{path} holds {held}")
    for pid in stack_processes(stack.state_dir):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue  # ended meanwhile
        if held := [name for name, secret in secrets.items() if secret in argv]:
            found.append(f"process {pid}'s arguments hold {held}: {argv[:300]}")
    return found

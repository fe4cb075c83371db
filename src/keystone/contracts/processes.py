"""Processes the project starts (the stack's services, the fleet's routers): spawned in their
own session, remembered by pid file, stopped by that pid only (never by name), so `down`
touches exactly what `up` started. A contract because the pid file is read by parts other
than the one that wrote it: `keystone stack down` stops the fleet's routers, a restarted
control adopts them, the dashboards' publisher signals the stack's Prometheus."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

# The Popen of every process this one spawned, until it is reaped here. A Popen dropped while
# its process runs is reaped by Python's subprocess module the next time anything starts a
# process, and the exit status (a router's "exited with -9") would be lost to whoever asks.
_CHILDREN: dict[int, subprocess.Popen] = {}


@dataclass(frozen=True)
class PidFile:
    path: Path

    def write(self, pid: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # The start time tells a live process from a later one that reused the pid.
        self.path.write_text(json.dumps({"pid": pid, "start": process_start_time(pid)}))

    def running_pid(self) -> int | None:
        """The recorded pid if that very process still runs; a stale file is removed."""
        try:
            record = json.loads(self.path.read_text())
        except (FileNotFoundError, ValueError):
            return None
        pid, start = record.get("pid"), record.get("start")
        if isinstance(pid, int) and start is not None and process_start_time(pid) == start:
            return pid
        self.path.unlink(missing_ok=True)
        return None

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def stat_fields(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, ...: field 3 of
    proc(5) is index 0), None once the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses; the fields after it are plain.
    return stat[stat.rindex(")") + 2 :].split()


def process_start_time(pid: int) -> int | None:
    """The process' start time in clock ticks since boot (field 22 of /proc/<pid>/stat)."""
    fields = stat_fields(pid)
    if fields is None or fields[0] == "Z":  # a zombie has exited; its parent has yet to reap it
        return None
    return int(fields[19])


def spawn(
    argv: list[str],
    log: Path,
    pidfile: PidFile,
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
    user: str | None = None,
) -> int:
    """Starts a server detached from this process (its own session), output to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(
            f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(argv)}\n".encode()
        )
        out.flush()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            start_new_session=True,
            user=user,
            group=user,
            extra_groups=[] if user else None,
        )
    _CHILDREN[proc.pid] = proc
    pidfile.write(proc.pid)
    return proc.pid


def reap(pid: int, timeout: float = 0) -> int | None:
    """`pid`'s exit code once it has ended, if this process spawned it; None while it runs (for
    up to `timeout` seconds), or when another process spawned it (its parent, or init, reaps
    it). A process killed shows as a zombie in /proc while its threads may still be exiting,
    and cannot be reaped until they have: `timeout` waits for that."""
    proc = _CHILDREN.get(pid)
    if proc is None:
        return None
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None
    del _CHILDREN[pid]
    return proc.returncode


def exited(pid: int) -> bool:
    """True once `pid` is gone (reaping it if this process spawned it)."""
    reap(pid)
    return process_start_time(pid) is None


def stop(pidfile: PidFile, sig: signal.Signals, timeout: float, group: bool = True) -> bool:
    """`sig` to the recorded process group (or, not `group`, to the recorded process alone,
    which then stops its children itself), SIGKILL to the group after `timeout` and to whatever
    of it is left once the process is gone; False if none ran."""
    pid = pidfile.running_pid()
    if pid is None:
        return False
    if group:
        _signal_group(pid, sig)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while not exited(pid):
        if time.monotonic() > deadline:
            _signal_group(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
        time.sleep(0.2)
    _signal_group(pid, signal.SIGKILL)
    _await_group_end(pid, GROUP_END_SECONDS)
    pidfile.remove()
    return True


GROUP_END_SECONDS = 10.0  # how long what is left of a group may take to die once killed


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)  # the session leader's group: the server and any children


def _await_group_end(pid: int, timeout: float) -> None:
    """Until no process of the group runs: a SIGKILL is delivered, not yet acted on, when
    `killpg` returns (a zombie, dead and waiting for its parent, counts as ended)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        members = [
            fields
            for entry in Path("/proc").iterdir()
            if entry.name.isdigit()
            and (fields := stat_fields(entry.name)) is not None
            and fields[2] == str(pid)  # field 5 of proc(5): the process group
            and fields[0] != "Z"
        ]
        if not members:
            return
        time.sleep(0.05)


def port_in_use(host: str, port: int) -> bool:
    """True when something listens on host:port (or on every address at that port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # SO_REUSEADDR lets the probe ignore TIME_WAIT leftovers of a server just stopped,
        # while a socket that is listening still makes bind fail.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from keystone.contracts.processes import (
    PidFile,
    exited,
    port_in_use,
    process_start_time,
    reap,
    spawn,
    stop,
)
from keystone.contracts.settings import Settings
from keystone.stack.services import Control


def test_a_pid_file_of_a_finished_process_is_stale(tmp_path: Path) -> None:
    finished = subprocess.Popen(["true"])
    finished.wait()
    pidfile = PidFile(tmp_path / "x.pid")
    pidfile.write(finished.pid)
    assert pidfile.running_pid() is None
    assert not pidfile.path.exists()


def test_a_reused_pid_is_not_taken_for_the_recorded_process(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        pidfile = PidFile(tmp_path / "x.pid")
        pidfile.path.write_text(f'{{"pid": {sleeper.pid}, "start": 1}}')  # another start time
        assert pidfile.running_pid() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_stop_ends_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = PidFile(tmp_path / "run" / "sh.pid")
    # A shell that leaves a child behind: stop must reach the child too. The pid is written
    # aside and renamed, so the file never exists empty (the redirection creates it first).
    pid = spawn(
        ["sh", "-c", "sleep 300 & echo $! > child.new && mv child.new child; wait"],
        tmp_path / "sh.log",
        pidfile,
        cwd=tmp_path,
    )
    assert pidfile.running_pid() == pid
    deadline = time.monotonic() + 10
    while not (tmp_path / "child").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int((tmp_path / "child").read_text())
    assert stop(pidfile, signal.SIGTERM, timeout=10) is True
    assert exited(pid)
    assert (
        not Path(f"/proc/{child}").exists()
        or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]
    )
    assert stop(pidfile, signal.SIGTERM, timeout=10) is False  # nothing left to stop


def test_a_killed_childs_exit_status_outlives_other_processes_being_started(
    tmp_path: Path,
) -> None:
    # The fleet tells a router killed by a signal from one that failed by this status; Python's
    # subprocess module reaps any dropped Popen whenever a process is started (promtool, say).
    pid = spawn(["sleep", "300"], tmp_path / "sleep.log", PidFile(tmp_path / "s.pid"), cwd=tmp_path)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while process_start_time(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.05)  # until it has ended (a zombie, waiting to be reaped)
    subprocess.run(["true"], check=True)
    assert reap(pid) == -signal.SIGKILL
    assert reap(pid) is None  # reaped once


def test_a_child_that_looks_gone_while_its_threads_exit_is_reaped_within_the_timeout(
    tmp_path: Path,
) -> None:
    # A killed router's main thread is a zombie in /proc before its other threads have ended,
    # and no wait can reap it until they have: the fleet must wait, not report no exit status.
    leader_exits_first = (
        "import ctypes, os, threading, time\n"
        "threading.Thread(target=lambda: (time.sleep(1.5), os._exit(3))).start()\n"
        "ctypes.CDLL(None).pthread_exit(None)\n"
    )
    argv = [sys.executable, "-c", leader_exits_first]
    pid = spawn(argv, tmp_path / "t.log", PidFile(tmp_path / "t.pid"), cwd=tmp_path)
    deadline = time.monotonic() + 10
    while process_start_time(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process_start_time(pid) is None  # looks gone...
    assert reap(pid) is None  # ...but cannot be reaped yet
    assert reap(pid, timeout=10) == 3


def test_port_in_use_tells_a_listening_port_from_a_free_one() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert port_in_use("127.0.0.1", port)
    assert not port_in_use("127.0.0.1", port)  # closed: free again at once


def test_control_stopping_stops_every_router_and_job_application_it_recorded(
    tmp_path: Path,
) -> None:
    """`stack down` stops control, whose `after_stop` stops what its fleet started: a router,
    and each kind of job's application, by their pid files."""
    settings = Settings(state_dir=tmp_path)
    folders = [settings.routers_run_dir, settings.job_run_dir("backfills")]
    folders.append(settings.job_run_dir("redrives"))
    pids = []
    for n, folder in enumerate(folders):
        record = PidFile(folder / f"s{n}.json")
        pid = spawn(["sleep", "60"], tmp_path / f"{n}.log", record, cwd=tmp_path)
        pids.append(pid)
    Control(settings).after_stop()
    for pid in pids:
        reap(pid, timeout=5)
        assert exited(pid), f"{pid} still runs"

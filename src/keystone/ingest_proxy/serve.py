"""Runs the ingest proxy: `KEYSTONE_PROXY_WORKERS` server processes on one port, each with its
own listening socket (SO_REUSEPORT), so the kernel spreads new connections across them.

    python -m keystone.ingest_proxy.serve      (settings from KEYSTONE_* variables)

Not `uvicorn --workers N`: its processes share one listening socket, and the one that wakes
first accepts a whole burst of new connections, which keep-alive then keeps on it. Under the
benchmark's steady load that left 25 of 33 connections on one of two processes (in one run
nearly all): one process near saturation beside an idle one.

Server i stays on the i-th CPU this process may use, with all its threads
(`KEYSTONE_PROXY_PIN_CPUS`): its event loop and its producer's threads wake each other many
times a request, and on one CPU that takes no cross-CPU interrupt (costly in a VM).

This process only supervises: it starts the servers, starts again any that dies, and on
SIGTERM or SIGINT stops them (each finishes its requests and flushes its producer). Should it be
killed outright, the kernel tells its servers to stop too.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import socket
import sys
import time
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess

import uvicorn
from prometheus_client.multiprocess import mark_process_dead
from uvicorn.config import STARTUP_FAILURE

from keystone.contracts.settings import Settings

log = logging.getLogger("keystone.ingest_proxy.serve")
STOP_TIMEOUT = 30.0  # seconds a server has to finish its requests once told to stop
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _listen(settings: Settings, shared: bool = True) -> socket.socket:
    """A socket bound to the proxy's address; `shared`, beside the other servers' (same user
    only, by the kernel). Not shared, the bind fails if anything at all listens there. If it
    cannot bind, this process ends (STARTUP_FAILURE) saying why."""
    host, port = settings.bind_host, settings.proxy_port
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if shared:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        log.error("cannot listen on %s:%d: %s", host, port, e.strerror)
        sys.exit(STARTUP_FAILURE)
    return sock


def _end_with(parent: int) -> None:
    """SIGTERM to this process when `parent` ends, however it ends: a supervisor killed outright
    must not leave servers holding the port with no one to stop them."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:  # it ended before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def serve_one(parent: int, cpu: int | None) -> None:
    """One server process: the app on its own socket, for as long as its supervisor lives; on
    `cpu` alone when given, with every thread it starts (they inherit this one's affinity)."""
    _end_with(parent)
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    settings = Settings()
    config = uvicorn.Config(
        "keystone.ingest_proxy.app:app_from_env",
        factory=True,
        host=settings.bind_host,
        port=settings.proxy_port,
        access_log=False,
        log_level="warning",
    )
    # Exits STARTUP_FAILURE, like _listen, if the app cannot start.
    uvicorn.Server(config).run(sockets=[_listen(settings)])


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = Settings()
    # Fails here if the port is taken, even by another proxy: never share its traffic with one.
    _listen(settings, shared=False).close()
    spawn = multiprocessing.get_context("spawn")  # a fresh interpreter each: no forked threads
    stopping = False

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    cpus = sorted(os.sched_getaffinity(0))

    def start(slot: int) -> BaseProcess:
        cpu = cpus[slot % len(cpus)] if settings.proxy_pin_cpus else None
        process = spawn.Process(
            target=serve_one, args=(os.getpid(), cpu), name="ingest-proxy-server"
        )
        process.start()
        return process

    servers = [start(slot) for slot in range(settings.proxy_workers)]
    first = set(servers)
    log.info("serving on port %d with processes %s", settings.proxy_port, [s.pid for s in servers])
    failed = False
    while not (stopping or failed):
        wait([s.sentinel for s in servers], timeout=0.5)
        for i, server in enumerate(servers):
            if server.is_alive() or stopping or failed:
                continue
            log.warning("server %d ended (exit code %s)", server.pid, server.exitcode)
            if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
                # Its live gauges leave the merged metrics: the registry version it had loaded
                # is no longer anyone's (`keystone_ingest_registry_version`).
                mark_process_dead(server.pid)
            # A first server that could not start fails the proxy at once, as uvicorn's does (so
            # `stack up` says why); a replacement that cannot start is tried again.
            failed = server in first and server.exitcode == STARTUP_FAILURE
            if not failed:
                time.sleep(1.0)  # a server that dies at once is not restarted in a tight loop
                if not stopping:
                    servers[i] = start(i)
    for server in servers:
        server.terminate()  # SIGTERM: uvicorn's graceful shutdown, lifespan included
    deadline = time.monotonic() + STOP_TIMEOUT
    for server in servers:
        server.join(max(0.0, deadline - time.monotonic()))
        if server.is_alive():
            server.kill()
            server.join()
    if failed:
        sys.exit(STARTUP_FAILURE)


if __name__ == "__main__":
    main()

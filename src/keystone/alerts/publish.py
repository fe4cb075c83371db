"""Keeps Alertmanager's configuration current (`<state>/alertmanager/alertmanager.yml`), made
from the registry's receivers on every pass of control's fleet, written only when it changed,
and then loaded by every Alertmanager peer.

Nothing is loaded unless `amtool check-config` passes it. The configuration without any owner's
receiver is checked first: a setting it refuses is the admin's to fix, and leaves the last good
file in place. Then each receiver whose own configuration amtool refuses, or whose address the
settings refuse now, is left out and named in `failures`, and every other receiver is
published: one owner's receiver never stops another's. No address is ever in a message:
amtool's words are given with every URL in them replaced.

A webhook's host is looked up again every `RECHECK_SECONDS`, not every pass; a lookup that
does not answer keeps the receiver as last decided (it passed when it was registered).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from keystone.alerts.config import config_yaml
from keystone.alerts.targets import Resolve, check_webhook, resolve
from keystone.contracts import http
from keystone.contracts.errors import KeystoneError, Unavailable
from keystone.contracts.processes import PidFile
from keystone.contracts.receivers import Receiver, ReceiverKind
from keystone.contracts.settings import Settings

log = logging.getLogger(__name__)

RECHECK_SECONDS = 300.0
URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"']*")


class AlertPublisher:
    def __init__(
        self,
        settings: Settings,
        lookup: Resolve = resolve,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.lookup = lookup
        self.clock = clock
        self.failures: dict[str, str] = {}  # '<owner>/<name>' -> why it is left out
        self._decided: dict[Receiver, tuple[str | None, float]] = {}  # its refusal, and when
        self._amtool: dict[Receiver, str] = {}  # receivers amtool refused, and its words
        # Loaded once by whoever leads the fleet now: the last leader may have written the
        # file and died before the peers loaded it.
        self._reload_pending = True

    def sync(self, receivers: list[Receiver]) -> bool:
        """Writes the configuration if it changed and has every peer load it; whether it was
        written."""
        path = self.settings.alertmanager_config_file
        failures = {r.field: why for r in receivers if (why := self._refusal(r)) is not None}
        self._amtool = {r: why for r, why in self._amtool.items() if r in receivers}
        failures |= {r.field: why for r, why in self._amtool.items()}
        usable = [r for r in receivers if r.field not in failures]
        text = config_yaml(self.settings, usable)
        written = False
        if not _same(path, text):
            base = check(config_yaml(self.settings, []))
            if base is not None:
                self._said(failures)
                raise ValueError(
                    f"Alertmanager's configuration does not pass amtool whatever the receivers "
                    f"(the settings' part: the last good one stays): {base}"
                )
            if check(text) is not None:  # each receiver alone, to find whose it is
                for r in usable:
                    problem = check(config_yaml(self.settings, [r]))
                    if problem is not None:
                        failures[r.field] = self._amtool[r] = problem
                usable = [r for r in usable if r.field not in failures]
                text = config_yaml(self.settings, usable)
                problem = check(text)
                if problem is not None:
                    self._said(failures)
                    raise ValueError(f"amtool refuses the receivers together: {problem}")
            _write_private(path, text)
            written = self._reload_pending = True
            log.info("alerts: Alertmanager's configuration written (%d receivers)", len(usable))
        self._said(failures)
        if self._reload_pending:
            self._reload()
        return written

    def _refusal(self, receiver: Receiver) -> str | None:
        """Why the receiver cannot be published under the settings as they are now (its
        address looked up again once RECHECK_SECONDS have passed)."""
        if receiver.kind is ReceiverKind.EMAIL:
            return None if self.settings.smtp_smarthost else "smtp_smarthost is not set"
        now = self.clock()
        decided = self._decided.get(receiver)
        if decided is not None and now - decided[1] < RECHECK_SECONDS:
            return decided[0]
        try:
            check_webhook(self.settings, receiver.url, self.lookup)
            refusal = None
        except Unavailable:  # its host did not answer: as last decided
            return decided[0] if decided is not None else None
        except (KeystoneError, ValueError) as e:  # a record that does not read is refused too
            refusal = e.message if isinstance(e, KeystoneError) else redacted(str(e))
        self._decided = {r: d for r, d in self._decided.items() if now - d[1] < 2 * RECHECK_SECONDS}
        self._decided[receiver] = (refusal, now)
        return refusal

    def _said(self, failures: dict[str, str]) -> None:
        for field, why in failures.items():
            if self.failures.get(field) != why:  # once per new reason
                log.error("alert receiver %s left out: %s", field, why)
        self.failures = failures

    def _reload(self) -> None:
        """Every peer loads the file: the embedded ones on SIGHUP, an external one by its
        /-/reload. Each is asked, whichever does not answer; then what failed is said."""
        settings = self.settings
        failed = []
        if settings.is_embedded("alertmanager"):
            for n in range(1, settings.alertmanager_replicas + 1):
                pid = PidFile(settings.run_dir / f"{alertmanager_service(n)}.pid").running_pid()
                try:
                    if pid is None:
                        raise ProcessLookupError
                    os.kill(pid, signal.SIGHUP)
                except ProcessLookupError:
                    failed.append(f"{alertmanager_service(n)} is not running")
        else:
            url = f"{settings.alertmanager_url}/-/reload"
            try:
                answer = http.client().post(url, timeout=10, auth=settings.alertmanager_auth())
                if answer.status_code >= 300:
                    failed.append(f"Alertmanager refused to reload ({answer.status_code})")
            except httpx.HTTPError as e:
                failed.append(f"Alertmanager did not reload: {e}")
        if failed:
            raise Unavailable(f"not reloaded: {'; '.join(failed)}", retry_after=5)
        self._reload_pending = False


def alertmanager_service(peer: int) -> str:
    """The service name of embedded Alertmanager peer `peer` (the first keeps the one name)."""
    return "alertmanager" if peer == 1 else f"alertmanager-{peer}"


def check(text: str) -> str | None:
    """What `amtool check-config` says is wrong with a configuration, every URL in it left
    out (None: it passes)."""
    amtool = shutil.which("amtool")
    if amtool is None:
        raise Unavailable("amtool is not installed (Debian's prometheus-alertmanager)")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "alertmanager.yml"
        _write_private(path, text)
        result = subprocess.run(
            [amtool, "check-config", str(path)], capture_output=True, text=True, check=False
        )
    if result.returncode == 0:
        return None
    # Its reason is on standard output; standard error only says that it failed.
    said = " ".join(f"{result.stdout} {result.stderr}".split()).replace(str(path), "")
    return redacted(said)


def redacted(message: str) -> str:
    """The message with every URL in it left out (one may be a receiver's credential)."""
    return URL.sub("<url>", message)


def _same(path: Path, text: str) -> bool:
    try:
        return path.read_text() == text
    except FileNotFoundError:
        return False


def _write_private(path: Path, text: str) -> None:
    """Replaces the file atomically, readable by its owner only: it holds receivers' secrets."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.tmp")
    staging.touch(mode=0o600, exist_ok=True)
    staging.chmod(0o600)
    staging.write_text(text)
    os.replace(staging, path)

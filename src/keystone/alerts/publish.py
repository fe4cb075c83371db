"""Keeps Alertmanager's configuration current (`<state>/alertmanager/alertmanager.yml`), made
from the registry's receivers on every pass of control's fleet, written only when it changed,
and then loaded by every Alertmanager peer.

Nothing is loaded unless `amtool check-config` passes it. A receiver that does not pass (its
check again against the settings, or Alertmanager's own) is left out, named in `failures`, and
every other receiver is published: one owner's receiver never stops another's. Its address is
never in a message: amtool's words are given with each receiver's address replaced by
`Receiver.where`.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
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


class AlertPublisher:
    def __init__(self, settings: Settings, lookup: Resolve = resolve) -> None:
        self.settings = settings
        self.lookup = lookup
        self.failures: dict[str, str] = {}  # '<owner>/<name>' -> why it is left out
        self._amtool: dict[Receiver, str] = {}  # receivers amtool refused, and its words
        self._reload_pending = False

    def sync(self, receivers: list[Receiver]) -> bool:
        """Writes the configuration if it changed and has every peer load it; whether it was
        written."""
        failures = {r.field: why for r in receivers if (why := self._refusal(r)) is not None}
        # Those amtool refused, as they are (a changed one is tried again).
        failures |= {r.field: self._amtool[r] for r in receivers if r in self._amtool}
        self._amtool = {r: why for r, why in self._amtool.items() if r in receivers}
        usable = [r for r in receivers if r.field not in failures]
        text = config_yaml(self.settings, usable)
        path = self.settings.alertmanager_config_file
        written = False
        if not _same(path, text):
            problem = check(text)
            if problem is not None:  # each owner's alone, to find whose it is
                for owner in sorted({r.owner for r in usable}):
                    theirs = [r for r in usable if r.owner == owner]
                    if check(config_yaml(self.settings, theirs)) is not None:
                        for r in theirs:
                            failures[r.field] = self._amtool[r] = _redacted(problem, receivers)
                usable = [r for r in usable if r.field not in failures]
                text = config_yaml(self.settings, usable)
                problem = check(text)
            if problem is not None:
                self._said(failures)
                raise ValueError(
                    "Alertmanager's configuration does not pass amtool, the last good one "
                    f"stays: {_redacted(problem, receivers)}"
                )
            _write_private(path, text)
            written = self._reload_pending = True
            log.info("alerts: Alertmanager's configuration written (%d receivers)", len(usable))
        self._said(failures)
        if self._reload_pending:
            self._reload()
        return written

    def _refusal(self, receiver: Receiver) -> str | None:
        """Why the receiver cannot be published under the settings as they are now."""
        if receiver.kind is ReceiverKind.EMAIL:
            return None if self.settings.smtp_smarthost else "smtp_smarthost is not set"
        try:
            check_webhook(self.settings, receiver.url, self.lookup)
        except KeystoneError as e:
            return e.message
        return None

    def _said(self, failures: dict[str, str]) -> None:
        for field, why in failures.items():
            if self.failures.get(field) != why:  # once per new reason
                log.error("alert receiver %s left out: %s", field, why)
        self.failures = failures

    def _reload(self) -> None:
        """Every peer loads the file: the embedded ones on SIGHUP, an external one by its
        /-/reload."""
        settings = self.settings
        if settings.is_embedded("alertmanager"):
            for n in range(1, settings.alertmanager_replicas + 1):
                pid = PidFile(settings.run_dir / f"{alertmanager_service(n)}.pid").running_pid()
                try:
                    if pid is None:
                        raise ProcessLookupError
                    os.kill(pid, signal.SIGHUP)
                except ProcessLookupError as e:
                    raise Unavailable(
                        f"{alertmanager_service(n)} is not running: not reloaded", retry_after=5
                    ) from e
        else:
            url = f"{settings.alertmanager_url}/-/reload"
            try:
                answer = http.client().post(url, timeout=10)
            except httpx.HTTPError as e:
                raise Unavailable(f"Alertmanager did not reload: {e}", retry_after=5) from e
            if answer.status_code >= 300:
                raise Unavailable(
                    f"Alertmanager refused to reload ({answer.status_code}): {answer.text[:200]}",
                    retry_after=5,
                )
        self._reload_pending = False


def alertmanager_service(peer: int) -> str:
    """The service name of embedded Alertmanager peer `peer` (the first keeps the one name)."""
    return "alertmanager" if peer == 1 else f"alertmanager-{peer}"


def check(text: str) -> str | None:
    """What `amtool check-config` says is wrong with a configuration (None: it passes)."""
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
    return (result.stderr or result.stdout).strip().replace(str(path), "the configuration")


def _redacted(message: str, receivers: list[Receiver]) -> str:
    for r in receivers:
        if r.url:
            message = message.replace(r.url, r.where)
    return message


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

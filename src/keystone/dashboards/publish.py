"""Keeps every stream's generated dashboard and alert rules current on disk: rewritten only when
they change, removed with their stream, and Prometheus reloaded when its rules changed.

    <state>/dashboards/<stream>.json        the Grafana dashboard model (also at the API)
    <state>/prometheus/rules/<stream>.yml   the stream's rule group, which Prometheus loads

Control's fleet calls `sync` on every pass, so they follow the registry whatever changed it. A
rules file is checked with `promtool check rules` before it replaces the last good one: one bad
file would stop Prometheus from loading any.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
from pathlib import Path

import httpx

from keystone.contracts.errors import Unavailable
from keystone.contracts.processes import PidFile
from keystone.contracts.settings import Settings
from keystone.contracts.spec import StreamSpec
from keystone.dashboards.grafana import dashboard
from keystone.dashboards.rules import rules_yaml

log = logging.getLogger(__name__)


def dashboard_url(settings: Settings, stream: str) -> str:
    return f"{settings.control_url}/ui/streams/{stream}/dashboard"


class Publisher:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._reload_pending = False
        self.failures: dict[str, str] = {}  # stream -> why its files were not published

    def sync(self, specs: list[StreamSpec], keep: set[str] | None = None) -> list[str]:
        """Writes what changed, removes what is no more (but the files of the streams in
        `keep`); returns what it did, for the log. Each stream on its own: one whose rules do
        not pass keeps its last good file and is named in `failures`, and every other stream's
        go on being published."""
        boards, rules = self.settings.dashboards_dir, self.settings.prometheus_rules_dir
        done = []
        failures = {}
        for spec in specs:
            try:
                board = json.dumps(dashboard(spec), indent=2, sort_keys=True) + "\n"
                if _write(boards / f"{spec.name}.json", board):
                    done.append(f"dashboard {spec.name}")
                rule = rules_yaml(spec, dashboard_url(self.settings, spec.name))
                if _write(rules / f"{spec.name}.yml", rule, check=_promtool):
                    done.append(f"alert rules {spec.name}")
                    self._reload_pending = True
            except (ValueError, OSError) as e:
                failures[spec.name] = str(e)
                if self.failures.get(spec.name) != str(e):  # once per new reason
                    log.error("dashboards of stream %s not published: %s", spec.name, e)
        self.failures = failures
        names = {s.name for s in specs} | (keep or set())
        for folder, suffix in ((boards, ".json"), (rules, ".yml")):
            for path in folder.glob(f"*{suffix}") if folder.exists() else []:
                if path.stem not in names:
                    path.unlink()
                    done.append(f"removed {path.name}")
                    self._reload_pending |= suffix == ".yml"
        if self._reload_pending:
            self._reload()
        if done:
            log.info("dashboards: %s", ", ".join(done))
        return done

    def _reload(self) -> None:
        if self.settings.is_embedded("prometheus"):
            # The stack's Prometheus has no HTTP lifecycle API (it would let any web page on
            # this machine stop it): it reloads on SIGHUP.
            pid = PidFile(self.settings.run_dir / "prometheus.pid").running_pid()
            try:
                if pid is None:
                    raise ProcessLookupError
                os.kill(pid, signal.SIGHUP)
            except ProcessLookupError as e:
                raise Unavailable(
                    "Prometheus is not running: rules not reloaded", retry_after=5
                ) from e
            self._reload_pending = False
            return
        url = f"{self.settings.prometheus_url}/-/reload"
        try:
            answer = httpx.post(url, timeout=10)
        except httpx.HTTPError as e:
            raise Unavailable(f"Prometheus did not reload its rules: {e}", retry_after=5) from e
        if answer.status_code >= 300:
            # A Prometheus of one's own may not allow reloads: it loads the files itself.
            log.warning("Prometheus at %s refused a reload (%s)", url, answer.status_code)
        self._reload_pending = False


def _write(path: Path, text: str, check=None) -> bool:
    """Replaces the file if its text changed (atomically, after `check` passes)."""
    try:
        if path.read_text() == text:
            return False
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.tmp")
    staging.write_text(text)
    if check is not None:
        check(staging)
    os.replace(staging, path)
    return True


def _promtool(path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        return  # no Prometheus tools here: Prometheus itself will say what it cannot load
    result = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        path.unlink()
        raise ValueError(f"generated rules for {path.stem} do not pass promtool: {result.stdout}")

"""Prometheus file-discovery targets: each component registers itself by writing one file.

Prometheus watches the folder, so a new or removed file takes effect without a reload.
"""

from __future__ import annotations

import json
import os

from keystone.contracts.settings import Settings


def write_target(
    settings: Settings, name: str, addresses: list[str], labels: dict[str, str]
) -> None:
    """Registers (or replaces) the target `name`: host:port addresses with their labels."""
    folder = settings.prometheus_targets_dir
    folder.mkdir(parents=True, exist_ok=True)
    staging = folder / f".{name}.json.tmp"
    staging.write_text(json.dumps([{"targets": addresses, "labels": labels}], indent=2))
    # Atomic: Prometheus never reads a half-written file.
    os.replace(staging, folder / f"{name}.json")


def remove_target(settings: Settings, name: str) -> None:
    (settings.prometheus_targets_dir / f"{name}.json").unlink(missing_ok=True)

"""The audit log: who changed what, when; every registry write with an entry appends it to the
log and to its owner's copy (`base.append_audit`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from keystone.contracts.registry import AUDIT
from keystone.control.store.base import Repository, owner_audit


@dataclass(frozen=True)
class AuditEntry:
    id: str
    at: float
    who: str
    action: str
    target: str
    detail: dict[str, Any]
    owner: str = ""  # whose the target was when it changed ("" in entries older than this)


class AuditLog(Repository):
    def entries(self, limit: int = 100, owner: str | None = None) -> list[AuditEntry]:
        """The newest entries first: all of them, or those on what was `owner`'s."""
        stream = AUDIT if owner is None else owner_audit(owner)
        entries = self._call(self.redis.xrevrange, stream, count=limit)
        return [_entry(entry_id, values) for entry_id, values in entries]


def _entry(entry_id: bytes, values: dict[bytes, bytes]) -> AuditEntry:
    text = {k.decode(): v.decode() for k, v in values.items()}
    return AuditEntry(
        id=entry_id.decode(),
        at=float(text["at"]),
        who=text["who"],
        action=text["action"],
        target=text["target"],
        detail=json.loads(text["detail"]),
        owner=text.get("owner", ""),
    )

"""The fronting cluster that takes writes (`contracts.fronting.Active`): one record, changed in
a registry transaction (its version bumped, so every proxy process reloads it within a second),
each switch audited, counted and logged (for the dashboards' marks)."""

from __future__ import annotations

import redis

from keystone.contracts.fronting import Active, Switch
from keystone.contracts.registry import FRONTING, FRONTING_LOG, FRONTING_LOG_KEPT, FRONTING_SWITCHES
from keystone.contracts.settings import Settings
from keystone.control.store.base import Repository, append_audit, audit


class FrontingRecords(Repository):
    def switch(
        self,
        settings: Settings,
        who: str,
        to: str,
        stream: str | None,
        reason: str,
        now: float,
        only_from: str | None = None,
    ) -> tuple[Active, Active] | None:
        """Makes `to` take the writes of `stream`, or of every stream without an override of
        its own (None), unless it does already; `only_from`: only while the cluster taking them
        is that one (the fleet's failover must not undo a switch made meanwhile). The records
        before and after, or None when nothing changed."""

        def write(tx: redis.client.Pipeline) -> tuple[Active, Active] | None:
            before = self.reader.fronting(settings)
            current = before.cluster if stream is None else before.of(stream)
            if current == to or (only_from is not None and current != only_from):
                return None
            changed = {"since": now, "reason": reason}
            if stream is None:
                after = before.model_copy(update={"cluster": to, **changed})
            else:
                after = before.model_copy(
                    update={"streams": {**before.streams, stream: to}, **changed}
                )
            after = after.within(settings.fronting_clusters)
            tx.multi()
            tx.set(FRONTING, after.model_dump_json())
            tx.hincrby(FRONTING_SWITCHES, f"{current}>{to}>{reason}", 1)
            logged = Switch(at=now, stream=stream, was=current, to=to, reason=reason)
            tx.xadd(
                FRONTING_LOG,
                {"switch": logged.model_dump_json()},
                maxlen=FRONTING_LOG_KEPT,
                approximate=True,
            )
            detail = {"from": current, "to": to, "reason": reason}
            append_audit(tx, audit(who, "fronting.switch", stream or "*", owner="admin", **detail))
            return before, after

        return self.tx.run(write, watch=[FRONTING], bump=True)

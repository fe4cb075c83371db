"""The fleet's own records, outside the registry's version: its view of each router, the
samples of each stream's traffic it sizes routers by, and the lease of the process that leads
it."""

from __future__ import annotations

import json
import logging

from keystone.contracts.names import check_stream_name
from keystone.contracts.registry import RouterState, key
from keystone.control.store.base import Repository

log = logging.getLogger(__name__)


class FleetRecords(Repository):
    def put_state(self, stream: str, state: RouterState) -> None:
        self._call(self.redis.hset, key("router", stream), mapping=state.to_hash())

    def forget(self, stream: str) -> None:
        self._call(self.redis.delete, key("router", stream), key("traffic", stream))

    def traffic(self, stream: str) -> list[tuple[float, int]]:
        """The fleet's samples of the stream's input, (time, records so far), oldest first; a
        record that does not read is none (sampling starts again)."""
        raw = self._call(self.redis.get, key("traffic", check_stream_name(stream)))
        try:
            samples = json.loads(raw) if raw is not None else []
            return [(float(t), int(n)) for t, n in samples]
        except (ValueError, TypeError):
            log.warning("the traffic samples of %s do not read: sampling again", stream)
            return []

    def put_traffic(self, stream: str, samples: list[tuple[float, int]]) -> None:
        self._call(self.redis.set, key("traffic", check_stream_name(stream)), json.dumps(samples))

    def hold_lease(self, name: str, holder: str, seconds: float) -> bool:
        """Takes or renews an expiring lock; True while `holder` has it."""
        lease = key(name)
        ms = int(seconds * 1000)
        if self._call(self.redis.set, lease, holder, nx=True, px=ms):
            return True
        # Renew only our own lease, atomically.
        renewed = self._call(
            self.redis.eval,
            "if redis.call('get', KEYS[1]) == ARGV[1] then "
            "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end",
            1,
            lease,
            holder,
            ms,
        )
        return bool(renewed)

    def release_lease(self, name: str, holder: str) -> None:
        self._call(
            self.redis.eval,
            "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
            "else return 0 end",
            1,
            key(name),
            holder,
        )

"""Per-app rate quotas (events per second), shared by every proxy process through Redis."""

from __future__ import annotations

import time

import redis.asyncio as aioredis

from contracts.errors import RateLimited, Unavailable
from control.store import PREFIX


class Quota:
    def __init__(self, client: aioredis.Redis) -> None:
        self._redis = client

    async def take(self, app: str, rate: int, events: int) -> None:
        """Counts `events` against this second's window; 429 once the app is over `rate`."""
        if rate <= 0:
            return
        now = time.time()
        window = f"{PREFIX}rate:{app}:{int(now)}"
        try:
            async with self._redis.pipeline(transaction=True) as tx:
                used, _ = await tx.incrby(window, events).expire(window, 2).execute()
        except aioredis.RedisError as e:
            raise Unavailable(f"the quota store (Redis) is unreachable: {e}", retry_after=2) from e
        if used > rate:
            raise RateLimited(
                f"app {app!r} is over its quota of {rate} events per second",
                retry_after=1 - (now % 1),
                quota=rate,
            )

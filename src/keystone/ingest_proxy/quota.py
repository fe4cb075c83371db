"""Per-app rate quotas (events per second), shared by every proxy process through Redis.

A token bucket per app, kept and decided in Redis by one script (so proxies on several hosts
share it, on Redis's clock): it holds at most one second of the app's rate and refills at that
rate. A request takes as many tokens as it has events, and only when it is admitted: a refused
request takes nothing. A request larger than one second's quota could never be admitted, so it
is refused for good (413 naming the quota; the client splits its batches to fit) rather than
answered 429 forever.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from keystone.contracts.errors import PayloadTooLarge, RateLimited, Unavailable
from keystone.contracts.registry import key

# KEYS[1]: the app's bucket; ARGV: rate (events/s), events, and 1 to only look (take nothing).
# Returns -1 when admitted, else the milliseconds until it would be.
_TAKE = """
local rate, events = tonumber(ARGV[1]), tonumber(ARGV[2])
local clock = redis.call('TIME')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local bucket = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(bucket[1]) or rate
local at = tonumber(bucket[2]) or now
tokens = math.min(rate, tokens + math.max(0, now - at) * rate / 1000)
if tokens < events then
  return math.ceil((events - tokens) * 1000 / rate)
end
if ARGV[3] == '1' then
  return -1
end
tokens = tokens - events
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', now)
redis.call('PEXPIRE', KEYS[1], math.ceil((rate - tokens) * 1000 / rate) + 1000)
return -1
"""


class Quota:
    def __init__(self, client: aioredis.Redis) -> None:
        self._redis = client
        self._take = client.register_script(_TAKE)

    async def admits_any(self, app: str, rate: int) -> None:
        """429 when the app's bucket is empty: asked before a large body is read and parsed,
        so an app over its quota cannot make the proxy do that work for nothing."""
        if rate > 0:
            await self._ask(app, rate, 1, look=True)

    async def take(self, app: str, rate: int, events: int) -> None:
        """Takes `events` from the app's bucket; 429 with when to retry when it cannot."""
        if rate <= 0:
            return
        if events > rate:
            raise PayloadTooLarge(
                f"{events} events in one request can never fit app {app!r}'s quota of {rate} "
                f"events per second: send at most {rate} per request",
                setting="quota",
                limit=rate,
                quota=rate,
            )
        await self._ask(app, rate, events, look=False)

    async def _ask(self, app: str, rate: int, events: int, look: bool) -> None:
        try:
            wait_ms = await self._take(
                keys=[key("quota", app)], args=[rate, events, 1 if look else 0]
            )
        except aioredis.RedisError as e:
            raise Unavailable(f"the quota store (Redis) is unreachable: {e}", retry_after=2) from e
        if wait_ms >= 0:
            raise RateLimited(
                f"app {app!r} is over its quota of {rate} events per second",
                retry_after=wait_ms / 1000,
                quota=rate,
            )

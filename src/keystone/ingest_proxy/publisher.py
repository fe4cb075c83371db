"""Writes events to Kafka and tells, per event, whether Kafka acknowledged it.

One idempotent producer (acks=all) per process. Its delivery reports are served on the event
loop itself, by a task that polls while anything is in flight: a request's outcome then needs
no thread, lock or hand-off between threads, and the proxy answers only with what Kafka really
holds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from functools import partial

from confluent_kafka import KafkaException, Producer

from keystone.contracts import kafka_clients
from keystone.contracts.settings import Settings

Record = tuple[bytes, bytes, list[tuple[str, bytes]]]  # key, value, headers
POLL_INTERVAL = 0.001  # seconds between polls while events are in flight


class _Batch:
    """The outcome of one request's events."""

    def __init__(self, size: int) -> None:
        self.errors: list[str | None] = [None] * size
        self._pending = size
        self.done = asyncio.get_running_loop().create_future()

    def settle(self, index: int, error: str | None) -> None:
        self.errors[index] = error
        self._pending -= 1
        if self._pending == 0 and not self.done.done():  # done: the request was cancelled
            self.done.set_result(self.errors)

    def delivered(self, index: int, err, _msg) -> None:
        self.settle(index, None if err is None else err.str())


class Publisher:
    def __init__(self, settings: Settings) -> None:
        timeout_ms = int(settings.kafka_ack_timeout_seconds * 1000)
        self.ack_timeout = settings.kafka_ack_timeout_seconds
        self._producer = Producer(
            kafka_clients.librdkafka(settings)
            | {
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": settings.kafka_linger_ms,
                "queue.buffering.max.messages": settings.kafka_queue_max_messages,
                "message.max.bytes": settings.max_record_bytes,
                # Bounded: an event Kafka has not acknowledged by then is reported failed (503).
                "message.timeout.ms": timeout_ms,
                "socket.timeout.ms": min(timeout_ms, 60000),
                "log_level": 3,
            }
        )
        self._poller: asyncio.Task | None = None

    def _keep_polling(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        while len(self._producer):  # events queued or awaiting their acknowledgement
            self._producer.poll(0)
            await asyncio.sleep(POLL_INTERVAL)

    async def publish(self, topic: str, records: Sequence[Record]) -> list[str | None]:
        """Produces every record; the result has, per record, None or why it failed."""
        batch = _Batch(len(records))
        deadline = time.monotonic() + self.ack_timeout
        for index, (key, value, headers) in enumerate(records):
            while True:
                try:
                    self._producer.produce(
                        topic,
                        value,
                        key,
                        headers=headers,
                        on_delivery=partial(batch.delivered, index),
                    )
                    break
                except BufferError:
                    # The local queue is full: wait for room, within the same bound.
                    if time.monotonic() > deadline:
                        batch.settle(index, "the producer queue stayed full")
                        break
                    self._keep_polling()  # room is made as acknowledgements are served
                    await asyncio.sleep(0.005)
                except KafkaException as e:
                    batch.settle(index, e.args[0].str())
                    break
        self._keep_polling()
        return await batch.done

    def reachable(self, timeout: float = 2.0) -> bool:
        """True when a broker answers a metadata request."""
        try:
            return bool(self._producer.list_topics(timeout=timeout).brokers)
        except KafkaException:
            return False

    def abandon(self) -> None:
        """Gives up on every event the cluster has not acknowledged: it is lost, so each is
        reported failed now (a 503 with Retry-After, which the producer retries wherever
        writes go then), not when its timeout ends. One that was sent may still be in the lost
        cluster's log, as after any timeout: its retry is then a second copy, under its own
        guid, which the routers deliver once the cluster is back and read."""
        self._producer.purge(in_queue=True, in_flight=True, blocking=False)

    def close(self, timeout: float = 10.0) -> None:
        self._producer.flush(timeout)

"""Writes events to Kafka and tells, per event, whether Kafka acknowledged it.

One idempotent producer (acks=all) per process. A thread polls it for delivery reports, and a
request's awaitable resolves once every one of its events is acknowledged or has failed, so the
proxy answers only with what Kafka really holds.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from functools import partial

from confluent_kafka import KafkaException, Producer

from contracts.settings import Settings

Record = tuple[bytes, bytes, list[tuple[str, bytes]]]  # key, value, headers


class _Batch:
    """The outcome of one request's events; completed from the polling thread."""

    def __init__(self, size: int, loop: asyncio.AbstractEventLoop) -> None:
        self.errors: list[str | None] = [None] * size
        self._pending = size
        self._lock = threading.Lock()
        self._loop = loop
        self.done = loop.create_future()

    def settle(self, index: int, error: str | None) -> None:
        self.errors[index] = error
        with self._lock:
            self._pending -= 1
            finished = self._pending == 0
        if finished:
            self._loop.call_soon_threadsafe(self._finish)

    def delivered(self, index: int, err, _msg) -> None:
        self.settle(index, None if err is None else err.str())

    def _finish(self) -> None:
        if not self.done.done():
            self.done.set_result(self.errors)


class Publisher:
    def __init__(self, settings: Settings) -> None:
        timeout_ms = int(settings.kafka_ack_timeout_seconds * 1000)
        self.ack_timeout = settings.kafka_ack_timeout_seconds
        self._producer = Producer(
            {
                "bootstrap.servers": settings.kafka_bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": settings.kafka_linger_ms,
                "queue.buffering.max.messages": settings.kafka_queue_max_messages,
                # Bounded: an event Kafka has not acknowledged by then is reported failed (503).
                "message.timeout.ms": timeout_ms,
                "socket.timeout.ms": min(timeout_ms, 60000),
                "log_level": 3,
            }
        )
        self._running = True
        self._poller = threading.Thread(target=self._poll, name="kafka-delivery", daemon=True)
        self._poller.start()

    def _poll(self) -> None:
        while self._running:
            self._producer.poll(0.05)

    async def publish(self, topic: str, records: Sequence[Record]) -> list[str | None]:
        """Produces every record; the result has, per record, None or why it failed."""
        batch = _Batch(len(records), asyncio.get_running_loop())
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
                    await asyncio.sleep(0.005)
                except KafkaException as e:
                    batch.settle(index, e.args[0].str())
                    break
        return await batch.done

    def reachable(self, timeout: float = 2.0) -> bool:
        """True when a broker answers a metadata request."""
        try:
            return bool(self._producer.list_topics(timeout=timeout).brokers)
        except KafkaException:
            return False

    def close(self, timeout: float = 10.0) -> None:
        self._running = False
        self._poller.join()
        self._producer.flush(timeout)

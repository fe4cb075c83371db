"""The publisher's bounds, with real librdkafka and no broker answering: every event of a
request is settled (never left hanging) within the acknowledgement timeout, each with why."""

import asyncio
import socket
import time

from contracts.settings import Settings
from ingest_proxy.publisher import Publisher


def unanswered_address() -> str:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_a_full_queue_and_a_silent_broker_fail_each_event_in_bounded_time() -> None:
    settings = Settings(
        kafka_bootstrap=unanswered_address(),
        kafka_ack_timeout_seconds=2,
        kafka_queue_max_messages=5,
    )
    publisher = Publisher(settings)
    try:
        records = [(b"k", b'{"n": %d}' % i, [("ks_guid", b"g")]) for i in range(12)]
        started = time.monotonic()
        errors = asyncio.run(publisher.publish("keystone.nowhere", records))
        elapsed = time.monotonic() - started
    finally:
        publisher.close(timeout=1)
    full, timed_out = "the producer queue stayed full", "Local: Message timed out"
    assert len(errors) == 12 and set(errors) <= {full, timed_out}, errors
    assert errors[:5] == [timed_out] * 5  # queued, never acknowledged
    assert errors[-1] == full  # still no room once the bound had passed
    assert elapsed < 10  # bounded by the acknowledgement timeout, not left waiting
    assert not publisher.reachable(timeout=0.5)

"""The publisher with real librdkafka: with no broker answering, every event of a request is
settled (never left hanging) within the acknowledgement timeout, each with why; with the stack's
broker, a request that goes away leaves the others' acknowledgements flowing."""

import asyncio
import socket
import time
import uuid

from keystone.contracts.settings import Settings
from keystone.ingest_proxy.publisher import Publisher
from keystone.router.topics import create_topics
from tests.support.stack import Stack


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


def test_a_cancelled_request_does_not_hold_up_the_others(stack: Stack) -> None:
    topic = f"publisher-test-{uuid.uuid4().hex[:8]}"
    settings = stack.settings
    # One partition: the gone request's acknowledgements are all served before the other's.
    create_topics(settings, {topic: 1})
    publisher = Publisher(settings)
    records = [(b"k", b'{"n": %d}' % i, [("ks_guid", b"g")]) for i in range(50)]

    async def scenario() -> list[str | None]:
        gone = asyncio.create_task(publisher.publish(topic, records))
        await asyncio.sleep(0)  # it has produced its events and awaits their acknowledgements
        gone.cancel()  # as when its producer disconnects
        return await asyncio.wait_for(publisher.publish(topic, records), timeout=30)

    try:
        assert asyncio.run(scenario()) == [None] * 50
    finally:
        publisher.close(timeout=5)

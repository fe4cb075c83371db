"""The event on the fronting topic: the producer's bytes as the value, metadata as headers."""

from __future__ import annotations

import json

GUID = "ks_guid"  # a UUID, the event's identity from ingest to every sink
TIMESTAMP = "ks_ts"  # ingest time, epoch milliseconds
HOST = "ks_host"  # the proxy's host name
APP = "ks_app"  # the authenticated producing app
STREAM = "ks_stream"
HOPS = "ks_hops"  # Keystone sinks passed; absent means 0
# On a record a rewind, a backfill or a redrive wrote again to a Kafka or Keystone output: its id.
REPLAY = "ks_replay"

# Added to a record in the dead-letter topic: why it is there and which output sent it
# (absent when the stream itself could not read the event).
DLQ_REASON = "ks_dlq_reason"
DLQ_OUTPUT = "ks_dlq_output"
# How many times a redrive has sent the event again (absent: never); a dead letter a redrive
# writes carries it on.
REDRIVES = "ks_redrives"

# Metadata names in filters and projections, and the header each one reads.
METADATA = {"guid": GUID, "timestamp": TIMESTAMP, "host": HOST, "app": APP}


def common_headers(ts_ms: int, host: str, app: str, stream: str) -> list[tuple[str, bytes]]:
    """The headers every event of one request shares (all but the guid)."""
    return [
        (TIMESTAMP, str(ts_ms).encode()),
        (HOST, host.encode()),
        (APP, app.encode()),
        (STREAM, stream.encode()),
    ]


def event_headers(guid: bytes, common: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    return [(GUID, guid), *common]


def _refuse(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")


# What JSON is, for the proxy and the router alike: the standard's, so NaN and Infinity are not.
STRICT_JSON = json.JSONDecoder(parse_constant=_refuse)
JSON_SPACE = " \t\n\r"  # the whitespace JSON allows around values

"""A Keystone output read back: the target stream's fronting topic, by the ks_guid header (the
record's key is the producer's, carried on)."""

from __future__ import annotations

from keystone.router.sinks.kafka.readback import KafkaReader


class KeystoneReader(KafkaReader):
    by_header = True

"""Names that become Kafka topics, Hive tables and Elasticsearch indices: validated here,
and derived here, so nothing else ever reaches a topic, table or index name."""

from __future__ import annotations

import re

from contracts.errors import InvalidName

NAME_PATTERN = r"^[a-z][a-z0-9_]{1,62}$"
_NAME = re.compile(NAME_PATTERN)


def check_name(name: str, what: str = "name") -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidName(
            f"{what} {name!r} is not valid: use 2 to 63 characters, lower-case letters, digits "
            "and '_', starting with a letter"
        )
    return name


def fronting_topic(stream: str) -> str:
    return f"keystone.{check_name(stream, 'stream')}"


def dead_letter_topic(stream: str) -> str:
    return f"{fronting_topic(stream)}.dlq"

"""Names that become Kafka topics, Hive tables and Elasticsearch indices: validated here,
and derived here, so nothing else ever reaches a topic, table or index name."""

from __future__ import annotations

import re
from collections.abc import Callable

from keystone.contracts.errors import InvalidName

NAME_PATTERN = r"^[a-z][a-z0-9_]{1,62}$"
_NAME = re.compile(NAME_PATTERN)


def check_name(name: str, what: str = "name") -> str:
    # '__' joins a stream's and an output's names into a Hive table's: in a name, it would
    # let `a__b` + `c` and `a` + `b__c` share one table.
    if not isinstance(name, str) or not _NAME.fullmatch(name) or "__" in name:
        raise InvalidName(
            f"{what} {name!r} is not valid: use 2 to 63 characters, lower-case letters, digits "
            "and single '_'s, starting with a letter"
        )
    return name


def valid_name(name: object, check: Callable[[str], str] = check_name) -> bool:
    """Whether a name read from somewhere else (Redis, a file) passes `check` (an output's
    name by default), and so may become a path or a topic."""
    try:
        check(name)  # type: ignore[arg-type]
    except InvalidName:
        return False
    return True


def check_stream_name(name: str) -> str:
    """A stream's name, which must also leave its outputs' default topics (`<stream>.<output>`)
    clear of every fronting and dead-letter topic (`keystone.<stream>`), including Kafka's
    rule that '.' and '_' collide."""
    check_name(name, "stream")
    if name.split("_")[0] == "keystone":
        raise InvalidName(
            f"stream {name!r} is not valid: 'keystone' and names starting 'keystone_' are "
            "reserved (its output topics would be other streams' fronting topics)"
        )
    return name


def fronting_topic(stream: str) -> str:
    return f"keystone.{check_stream_name(stream)}"


def dead_letter_topic(stream: str) -> str:
    return f"{fronting_topic(stream)}.dlq"


def redriven_topic(stream: str) -> str:
    """The dead letters redrives have sent again, by position (a compacted topic): a second
    redrive of the same ones sends nothing."""
    return f"{dead_letter_topic(stream)}.redriven"


def topic_key(topic: str) -> str:
    """Kafka's collision form of a topic name: it refuses two topics that differ only in '.'
    against '_', so topics are owned, and compared, in this form."""
    return topic.replace(".", "_")


def output_topic(stream: str, output: str) -> str:
    """A Kafka output's topic when its sink names none."""
    return f"{check_stream_name(stream)}.{check_name(output, 'output')}"


def transactional_group(stream: str, output: str, query: str) -> str:
    """The consumer group an exactly-once output's transactions commit its input positions to,
    for one query (its checkpoint's id: a rewind's new checkpoint starts with none); each input
    partition's producer is `<group>.<partition>`."""
    return (
        f"{TRANSACTIONAL_GROUPS}.{check_stream_name(stream)}.{check_name(output, 'output')}.{query}"
    )


TRANSACTIONAL_GROUPS = "keystone-eo"  # what every exactly-once output's group starts with


HIVE_DATABASE = "keystone"
ARCHIVE = "archive"  # the stream's raw events: table `<stream>__archive` (a Hive output's name)
ARCHIVE_QUERY = "_archive"  # the router's query writing it: its checkpoint and metrics' label
# What the stream itself could not read (no output's doing): the router's dead-letter query, its
# checkpoint and metrics' output label, and the `output` of its dead letters in control's views
# and a redrive's selection.
STREAM_LEVEL = "_stream"


def hive_table(stream: str, output: str) -> str:
    """The table name within HIVE_DATABASE (two underscores: names hold single ones only)."""
    return f"{check_stream_name(stream)}__{check_name(output, 'output')}"


def index_prefix(stream: str, output: str) -> str:
    """Elasticsearch indices are `<prefix>yyyy.mm.dd`, one per day of ingest time (UTC)."""
    return f"{check_stream_name(stream)}-{check_name(output, 'output')}-"


def archive_table(stream: str) -> str:
    """The stream's archive, within HIVE_DATABASE."""
    return hive_table(stream, ARCHIVE)


# A shadow of an output (`contracts.shadows`) writes to targets of its own, named from the
# output's by a marker no live target's name can hold, so that nothing reading a live output's
# targets (by name or by pattern) ever reads a shadow's:
# - Kafka: `keystone-shadow` starts no output topic (the sink refuses it; one claimed before is
#   never a shadow's, `control.shadows`) and '-' is in no name, so `<stream>-<output>` is one
#   pair's only, in Kafka's collision form too;
# - Hive: a live table's name holds one '__' (`hive_table`), a shadow's two;
# - Elasticsearch: a live output's indices match `<stream>-<output>-*`, which starts with a
#   letter then '-'; no such pattern matches `shadow--...`.
SHADOW_TOPICS = "keystone-shadow"  # what every shadow's topic starts with (its Kafka ACLs')


def shadow_topic(stream: str, output: str) -> str:
    """Where a shadow of a Kafka or Keystone output writes its records."""
    return f"{SHADOW_TOPICS}.{check_stream_name(stream)}-{check_name(output, 'output')}"


def shadow_dead_letter_topic(stream: str, output: str) -> str:
    """Where a shadow's sink puts what it could not take (never the stream's dead-letter topic,
    whose letters a redrive sends to the live output)."""
    return f"{SHADOW_TOPICS}-dlq.{check_stream_name(stream)}-{check_name(output, 'output')}"


def shadow_table(stream: str, output: str) -> str:
    return f"{hive_table(stream, output)}__shadow"


def shadow_index_prefix(stream: str, output: str) -> str:
    return f"shadow--{index_prefix(stream, output)}"

"""The streams' specs in the registry: each change one transaction against every other
registry write, the names and Kafka topics a stream held kept its owner's for good, and each
stream's key for `hash`."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import Any

import redis
from pydantic import ValidationError

from keystone.contracts.errors import Conflict, InvalidName, InvalidSpec, NotFound
from keystone.contracts.names import check_stream_name, topic_key, valid_name
from keystone.contracts.registry import (
    HASHING_KEY_BYTES,
    RETIRED,
    TOPIC_NAMES,
    TOPICS,
    Unreadable,
    check_label,
    hashing_key_key,
    key,
    operations_key,
    read_spec,
)
from keystone.contracts.shadows import Shadow, ShadowEnd, ShadowPhase, change_refusal
from keystone.contracts.spec import StreamSpec, field_errors
from keystone.control.store.base import Repository

Change = Callable[[StreamSpec | None], StreamSpec | None]


def stored_form(spec: StreamSpec) -> str:
    """The JSON to store for a spec, once it is proven to read back as the very same spec: what
    is validated is exactly what every reader will later read."""
    raw = spec.to_json()
    try:
        again = StreamSpec.model_validate_json(raw)
    except ValidationError as e:
        raise InvalidSpec(
            "the stream spec does not read back as it was given", problems=field_errors(e)
        ) from e
    if again.to_json() != raw:
        raise InvalidSpec("the stream spec does not read back as it was given")
    return raw


class Specs(Repository):
    def put(self, spec: StreamSpec) -> None:
        """Stores a spec as is (tools and tests; control goes through `change_stream`)."""
        self.change(spec.name, lambda _: spec)

    def change(
        self,
        name: str,
        change: Change,
        audit: dict[str, Any] | None = None,
        replace_unreadable: bool = False,
        promoting: Shadow | None = None,
    ) -> tuple[StreamSpec | None, StreamSpec | None]:
        """Applies `change` (old spec or None -> new spec or None to delete) atomically against
        every other registry write: if anything changes meanwhile, it runs again on the new
        state. `change` validates and may raise. The audit entry is written in the same step.
        A deleted stream's name stays its owner's: another owner's stream of that name would
        read (and write) the data its topics, tables and indices keep. So does a Kafka output's
        topic, from the first spec stored that writes to it (`change` checks the claims).
        A stored spec that does not read back is `Unreadable`, or with `replace_unreadable`
        (the admin's) taken as none. While an output's shadow runs, what it is compared with
        stays (`contracts.shadows.change_refusal`): `promoting`, a running shadow whose version
        the change makes its output's, ends it in the same step."""
        shadows_key = operations_key(Shadow, name)

        def write(tx: redis.client.Pipeline) -> tuple[StreamSpec | None, StreamSpec | None]:
            tx.watch(shadows_key)
            raw = tx.get(key("stream", name))
            try:
                old = None if raw is None else read_spec(name, raw)
            except Unreadable:
                if not replace_unreadable:
                    raise
                old = None
            new = change(old)
            shadows = self.reader.operations(Shadow, name, tx)
            refused = change_refusal(old, new, shadows, promoting)
            if refused is not None:
                raise refused
            if promoting is not None and shadows.get(promoting.output) != promoting:
                raise Conflict(f"shadow {promoting.id} changed meanwhile: ask again")
            stored = None if new is None else stored_form(new)
            if new is not None:  # checked here, not before: an app may go meanwhile
                for app in new.producers:
                    if not tx.exists(key("app", app)):
                        raise NotFound(f"no app {app!r}")
            if old is None and new is not None:
                retired = tx.hget(RETIRED, name)
                if retired is not None and retired.decode(errors="replace") != new.owner:
                    # Their deleted stream's topics, tables and indices keep its data. Said as
                    # for a live stream of that name: whose it was is theirs to know.
                    raise Conflict(f"stream {name!r} already exists")
            tx.multi()
            if new is None:
                # Its key goes with it: what its outputs hashed can no longer be matched to
                # values (a stream made again under its name hashes with a new one).
                tx.delete(key("stream", name), hashing_key_key(name))
                tx.srem(key("streams"), name)
                if old is not None:
                    tx.hset(RETIRED, name, old.owner)
            else:
                tx.set(key("stream", name), stored)
                tx.setnx(hashing_key_key(name), secrets.token_hex(HASHING_KEY_BYTES))
                tx.sadd(key("streams"), name)
                for topic in new.kafka_topics().values():
                    tx.hsetnx(TOPICS, topic_key(topic), new.owner)
                    tx.hsetnx(TOPIC_NAMES, topic_key(topic), topic)
            if promoting is not None:
                ending = promoting.model_copy(
                    update={"phase": ShadowPhase.ENDING, "end": ShadowEnd.PROMOTED}
                )
                tx.hset(shadows_key, promoting.output, ending.model_dump_json())
            return old, new

        return self.tx.versioned(write, audit)

    def ensure_hashing_key(self, stream: str) -> bytes:
        """The stream's key for `hash`, made now if it has none yet (a stream stored before
        there were keys): the preview of a draft that hashes needs the key the output will get
        when it is stored. Made only while the stream exists (a key made as the stream is
        deleted would be a later stream's of that name)."""
        name = hashing_key_key(stream)

        def made(tx: redis.client.Pipeline) -> bytes:
            current = tx.get(name)
            if current is not None:
                return bytes.fromhex(current.decode())
            if not tx.exists(key("stream", stream)):
                raise NotFound(f"no stream {stream!r}")
            made = secrets.token_hex(HASHING_KEY_BYTES)
            tx.multi()
            tx.set(name, made)
            return bytes.fromhex(made)

        found = self.tx.run(made, watch=[key("stream", stream), name])
        assert found is not None, "run again until it commits"
        return found

    def purge(self, name: str, audit: dict[str, Any], fallback_owner: str) -> None:
        """Deletes a stored spec that does not read back (the admin's way out); its name stays
        retired (its topics keep their data) to the owner it names, else to `fallback_owner`."""

        def purge(tx: redis.client.Pipeline) -> None:
            raw = tx.get(key("stream", name))
            if raw is None:
                raise NotFound(f"no stream {name!r}")
            try:
                read_spec(name, raw)
            except Unreadable:
                owner = claimed_owner(raw) or fallback_owner
            else:
                raise Conflict(f"stream {name!r} reads back: delete it as any stream")
            tx.multi()
            tx.delete(key("stream", name), hashing_key_key(name))
            tx.srem(key("streams"), name)
            tx.hsetnx(RETIRED, name, owner)  # a name retired before stays whose it was

        self.tx.versioned(purge, audit)

    def retired(self) -> dict[str, str]:
        """Deleted streams' names and their owners (an entry that is no stream's name is
        skipped: it was not written here)."""
        retired = self._call(self.redis.hgetall, RETIRED)
        names = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in retired.items()}
        return {name: owner for name, owner in names.items() if valid_name(name, check_stream_name)}

    def topic_owners(self) -> dict[str, str]:
        """Kafka output topics (in Kafka's collision form) and their owners."""
        claims = self._call(self.redis.hgetall, TOPICS)
        return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in claims.items()}

    def topic_names(self) -> dict[str, str]:
        """Kafka output topics (in Kafka's collision form) and their names as made."""
        names = self._call(self.redis.hgetall, TOPIC_NAMES)
        return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in names.items()}


def claimed_owner(raw: bytes | None) -> str:
    """The owner an unreadable spec names, if it names a valid one."""
    try:
        owner = json.loads(raw or b"{}").get("owner")
        return check_label(owner, "owner")
    except (ValueError, AttributeError, RecursionError, InvalidName):
        return ""

"""Streams, their outputs and their producers: every change checked, provisioned, stored and
audited, in that order, for one caller.

A change is a function from the stored spec (or None) to the new spec (or None to delete). It
runs twice: once to check it and provision what the new spec writes to (idempotent, before the
fleet can deploy it), and again inside the store's transaction, on the state as it is then, so
two owners' concurrent changes cannot slip past each other's checks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from keystone.contracts.errors import Conflict, Forbidden, InvalidSpec, NotFound
from keystone.contracts.limits import check_limit
from keystone.contracts.names import dead_letter_topic, fronting_topic, topic_key
from keystone.contracts.registry import Unreadable
from keystone.contracts.schema import schema_limit_problems
from keystone.contracts.settings import Settings
from keystone.contracts.shadows import Shadow
from keystone.contracts.spec import OutputSpec, StreamSpec, load_spec
from keystone.control.kafka_access import AppAccess
from keystone.control.lineage import check_schema_change
from keystone.control.provisioner import provision
from keystone.control.store import Store, audit
from keystone.control.tenancy import ADMIN, Caller
from keystone.control.validation import (
    check_spec,
    kafka_name_problems,
    route_problems,
    route_twice_problems,
    topic_problems,
)


@dataclass(frozen=True)
class Applied:
    spec: StreamSpec | None  # None once deleted
    created: bool  # the stream did not exist before
    provisioned: list[str]  # what was made outside Redis (topics, templates...)


class Streams:
    def __init__(self, settings: Settings, store: Store, access: AppAccess | None = None) -> None:
        self.settings = settings
        self.store = store
        self.access = access if access is not None else AppAccess(settings, store)

    def list(self, caller: Caller) -> list[StreamSpec]:
        return [s for s in self.store.streams() if caller.owns(s.owner)]

    def get(self, caller: Caller, name: str) -> StreamSpec:
        return caller.visible_stream(self._read(caller, name))

    def create(self, caller: Caller, spec: StreamSpec) -> Applied:
        def change(old: StreamSpec | None) -> StreamSpec:
            if old is not None:
                raise Conflict(f"stream {spec.name!r} already exists")
            return self._checked(caller, spec, old)

        return self._apply(caller, spec.name, change, "stream.create")

    def put(self, caller: Caller, name: str, spec: StreamSpec, force: bool = False) -> Applied:
        """Creates the stream or replaces its spec; a new schema that removes or retypes a
        field an output reads is refused (409) unless `force`."""
        if spec.name != name:
            raise InvalidSpec(
                "the spec's name must be the stream's",
                problems=[{"field": "name", "message": f"expected {name!r}"}],
            )

        def change(old: StreamSpec | None) -> StreamSpec:
            if old is not None and not caller.owns(old.owner):  # as POST answers: the name
                raise Conflict(f"stream {name!r} already exists")  # is taken, nothing more
            checked = self._checked(caller, spec, old)
            check_schema_change(old, checked, force)
            return checked

        detail = {"force": "true"} if force else {}
        return self._apply(caller, name, change, "stream.put", **detail)

    def delete(self, caller: Caller, name: str) -> None:
        try:
            self._read(caller, name)
        except Unreadable:  # only the admin is told of it, and may delete it
            entry = audit(caller.name, "stream.purge", name, owner=ADMIN)
            self.store.specs.purge(name, entry, fallback_owner=ADMIN)
            return

        def change(old: StreamSpec | None) -> None:
            caller.visible_stream(self._existing(old, name))
            feeding = sorted(
                f"{s.name}.{o.name}"
                for s in self.store.streams()
                for o in s.outputs
                if o.sink.into_stream == name and s.name != name
            )
            if feeding:
                raise Conflict(
                    f"stream {name!r} receives events from {', '.join(feeding)}: "
                    "remove those outputs first"
                )
            return None

        self._apply(caller, name, change, "stream.delete")

    def put_output(self, caller: Caller, stream: str, output: OutputSpec) -> Applied:
        def change(old: StreamSpec | None) -> StreamSpec:
            spec = caller.visible_stream(self._existing(old, stream))
            return self._checked(caller, replaced(spec, output), spec)

        return self._apply(caller, stream, change, "output.put", output=output.name)

    def promote(self, caller: Caller, stream: str, shadow: Shadow) -> Applied:
        """Makes the running shadow's version its output's, ending the shadow in the same
        step (`control.shadows`)."""

        def change(old: StreamSpec | None) -> StreamSpec:
            spec = caller.visible_stream(self._existing(old, stream))
            return self._checked(caller, replaced(spec, shadow.version), spec)

        return self._apply(
            caller,
            stream,
            change,
            "output.shadow.promote",
            promoting=shadow,
            output=shadow.output,
            shadow=shadow.id,
        )

    def check(self, caller: Caller, spec: StreamSpec, old: StreamSpec) -> None:
        """Whether `old` could change to `spec` (a draft: a shadow's version in it, say): 403
        or 422 if not."""
        self._checked(caller, spec, old)

    def delete_output(self, caller: Caller, stream: str, output: str) -> Applied:
        def change(old: StreamSpec | None) -> StreamSpec:
            spec = caller.visible_stream(self._existing(old, stream))
            if spec.output(output) is None:
                raise NotFound(f"stream {stream!r} has no output {output!r}")
            return _replace(spec, outputs=[o for o in spec.outputs if o.name != output])

        return self._apply(caller, stream, change, "output.delete", output=output)

    def grant(self, caller: Caller, stream: str, app: str) -> Applied:
        """Lets an app post to the stream (any registered app: the stream's owner decides)."""
        self.store.get_app(app)

        def change(old: StreamSpec | None) -> StreamSpec:
            spec = caller.visible_stream(self._existing(old, stream))
            granted = _replace(spec, producers=sorted({*spec.producers, app}))
            self._check_limits(granted, spec)
            return granted

        return self._apply(caller, stream, change, "producer.grant", app=app)

    def revoke(self, caller: Caller, stream: str, app: str) -> Applied:
        def change(old: StreamSpec | None) -> StreamSpec:
            spec = caller.visible_stream(self._existing(old, stream))
            if app not in spec.producers:
                raise NotFound(f"app {app!r} is not a producer of stream {stream!r}")
            return _replace(spec, producers=[p for p in spec.producers if p != app])

        return self._apply(caller, stream, change, "producer.revoke", app=app)

    # Every change goes through here.

    def _apply(
        self,
        caller: Caller,
        name: str,
        change: Callable[[StreamSpec | None], StreamSpec | None],
        action: str,
        promoting: Shadow | None = None,
        **detail: str,
    ) -> Applied:
        replace = False
        try:
            before: StreamSpec | None = self.store.get_stream(name)
        except NotFound:
            before = None
        except Unreadable as e:
            if not caller.admin:  # as for any stream that is not theirs
                if action in ("stream.create", "stream.put"):
                    raise Conflict(f"stream {name!r} already exists") from e
                raise NotFound(f"no stream {name!r}") from e
            if action != "stream.put":  # only a replacement is made over it
                raise
            before, replace = None, True
        draft = change(before)
        provisioned = provision(self.settings, draft) if draft is not None else []
        # Whose the stream is: `change` checks again in the transaction that it still is.
        owner = (draft or before).owner  # type: ignore[union-attr]
        entry = audit(caller.name, action, name, owner=owner, provisioned=provisioned, **detail)
        old, new = self.store.specs.change(
            name, change, entry, replace_unreadable=replace, promoting=promoting
        )
        if _producers(old) != _producers(new):  # apps' Kafka ACLs follow their grants
            self.access.sync()
        return Applied(spec=new, created=old is None, provisioned=provisioned)

    def _checked(self, caller: Caller, spec: StreamSpec, old: StreamSpec | None) -> StreamSpec:
        """The spec, if the caller may own it and it passes every check; else 403 or 422."""
        if not caller.owns(spec.owner):
            raise Forbidden(f"you may only own streams yourself: owner {caller.name!r}")
        self._check_limits(spec, old)
        check_spec(spec, self.settings, old)
        known = {a.name for a in self.store.apps()}
        problems = [
            {"field": f"producers.{i}", "message": f"no app {p!r}: register it first"}
            for i, p in enumerate(spec.producers)
            if p not in known
        ]
        streams = {s.name: s for s in self.store.streams()}
        problems += route_problems(spec, streams, caller.admin)
        owners = self.store.specs.retired() | {n: s.owner for n, s in streams.items()}
        # Stored specs' topics too: a registry from before topics were claimed has no claims.
        topics = {
            topic_key(t): s.owner for s in streams.values() for t in s.kafka_topics().values()
        }
        problems += topic_problems(spec, topics | self.store.specs.topic_owners(), owners)
        # Each field's first problem only: a topic another owner holds also collides, say.
        for problem in route_twice_problems(spec, streams) + kafka_name_problems(
            spec, self._known_topics(streams)
        ):
            if problem["field"] not in {p["field"] for p in problems}:
                problems.append(problem)
        if problems:
            raise InvalidSpec("the stream spec is not valid", problems=problems)
        return spec

    def _known_topics(self, streams: dict[str, StreamSpec]) -> dict[str, str]:
        """Every topic the registry knows exists or will (Kafka's collision form -> name):
        live and deleted streams' fronting and dead-letter topics, Kafka outputs' topics."""
        known = self.store.specs.topic_names()
        # Names read from Redis: only a stream's name is one (`retired_streams` checks).
        for name in [*streams, *self.store.specs.retired()]:
            for topic in (fronting_topic(name), dead_letter_topic(name)):
                known[topic_key(topic)] = topic
        for stream in streams.values():
            for topic in stream.kafka_topics().values():
                known[topic_key(topic)] = topic
        return known

    def _check_limits(self, spec: StreamSpec, old: StreamSpec | None) -> None:
        """The limits on what one spec asks of the shared service. A spec stored under looser
        limits stays changeable: only what grows past a limit is refused."""
        limits = self.settings
        if old is None or spec.partitions > old.partitions:
            check_limit(limits, "max_partitions", spec.partitions, "partitions", "partitions")
        if old is None or len(spec.producers) > len(old.producers):
            check_limit(
                limits, "max_producers_per_stream", len(spec.producers), "producers", "producers"
            )
        if old is None or len(spec.outputs) > len(old.outputs):
            # A shadow running counts as one more output (`control.shadows`).
            shadows = self.store.operations(Shadow, spec.name).values() if old else []
            running = sum(1 for s in shadows if s.running)
            what = "outputs and shadows running" if running else "outputs"
            check_limit(
                limits, "max_outputs_per_stream", len(spec.outputs) + running, what, "outputs"
            )
        if spec.avro_schema is not None and (old is None or old.avro_schema != spec.avro_schema):
            problems = schema_limit_problems(spec.avro_schema, limits)
            if problems:
                raise InvalidSpec("the stream's schema is over a limit", problems=problems)
        if old is None:
            live = sum(1 for s in self.store.streams() if s.owner == spec.owner)
            check_limit(
                limits, "max_streams_per_owner", live + 1, f"streams of {spec.owner!r}", "name"
            )

    def _read(self, caller: Caller, name: str) -> StreamSpec:
        """The stored spec; one that does not read back is the admin's to know of (409), and
        for an owner it does not exist (it cannot be told whose it was)."""
        try:
            return self.store.get_stream(name)
        except Unreadable as e:
            if caller.admin:
                raise
            raise NotFound(f"no stream {name!r}") from e

    @staticmethod
    def _existing(spec: StreamSpec | None, name: str) -> StreamSpec:
        if spec is None:
            raise NotFound(f"no stream {name!r}")
        return spec


def replaced(spec: StreamSpec, output: OutputSpec) -> StreamSpec:
    """The spec with `output` in place of the output of its name (or added, last)."""
    outputs = [o for o in spec.outputs if o.name != output.name]
    index = next((i for i, o in enumerate(spec.outputs) if o.name == output.name), None)
    outputs.insert(len(outputs) if index is None else index, output)
    return _replace(spec, outputs=outputs)


def _replace(spec: StreamSpec, **changes: list) -> StreamSpec:
    """A changed copy, validated again as a whole (a frozen model's copy is not)."""
    data = spec.model_dump(by_alias=True)
    for key, items in changes.items():
        data[key] = [i.model_dump(by_alias=True) if isinstance(i, OutputSpec) else i for i in items]
    return load_spec(data)


def _producers(spec: StreamSpec | None) -> list[str]:
    return spec.producers if spec is not None else []

"""An Elasticsearch output: one document per record in the daily index of its ingest day
(`<stream>-<output>-yyyy.mm.dd`), its id the guid, so a record written again overwrites it."""

from __future__ import annotations

from typing import ClassVar, Literal

from keystone.contracts.names import index_prefix, shadow_index_prefix
from keystone.contracts.sinks.base import Replay, Sink, SinkKind


class ElasticsearchSink(Sink):
    type: Literal["elasticsearch"] = "elasticsearch"

    kind: ClassVar[SinkKind] = SinkKind(
        label="Elasticsearch",
        replay=Replay.IDEMPOTENT,
        modes=("realtime", "microbatch"),
        # Written from Python, which Real-time Mode feeds only at its checkpoints: a realtime
        # output runs micro-batches back to back instead.
        realtime=False,
        provisioner="keystone.router.sinks.elasticsearch.provision:ElasticsearchProvisioner",
        writer="keystone.router.sinks.elasticsearch.writer:ElasticsearchWriter",
        reader="keystone.router.sinks.elasticsearch.readback:ElasticsearchReader",
        exact_note="written again, a document is overwritten (its id is the guid)",
    )

    def target(self, stream: str, output: str) -> str:
        return f"index {self.index_prefix(stream, output)}*"

    def index_prefix(self, stream: str, output: str) -> str:
        """Its daily indices' names but the day (`yyyy.mm.dd`)."""
        if self.shadow:
            return shadow_index_prefix(stream, output)
        return index_prefix(stream, output)

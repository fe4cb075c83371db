"""A Hive output: its records in the table `keystone.<stream>__<output>`, partitioned by the
ingest hour, written in micro-batches; a batch written again replaces its rows."""

from __future__ import annotations

from typing import ClassVar, Literal

from keystone.contracts.names import HIVE_DATABASE, hive_table, shadow_table
from keystone.contracts.sinks.base import Replay, Sink, SinkKind


class HiveSink(Sink):
    type: Literal["hive"] = "hive"

    kind: ClassVar[SinkKind] = SinkKind(
        label="Hive",
        replay=Replay.RESETTABLE,
        modes=("microbatch",),  # a table's files are written per batch
        realtime=False,
        provisioner="keystone.router.sinks.hive.provision:HiveProvisioner",
        writer="keystone.router.sinks.hive.writer:HiveWriter",
        reader="keystone.router.sinks.hive.readback:HiveReader",
        reads_with_spark=True,
        exact_note="written again, a batch replaces its rows",
    )

    def target(self, stream: str, output: str) -> str:
        return f"table {HIVE_DATABASE}.{self.table(stream, output)}"

    def table(self, stream: str, output: str) -> str:
        return shadow_table(stream, output) if self.shadow else hive_table(stream, output)

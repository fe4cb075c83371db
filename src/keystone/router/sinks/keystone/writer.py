"""`keystone`: the projected record becomes an event of another stream, on its fronting topic.

The event keeps its guid, ingest time and producing app; `ks_stream` names the new stream and
`ks_hops` counts one more Keystone sink passed (control refuses specs that would loop).
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from keystone.contracts import envelope
from keystone.router.sinks.base import RecordWriter


class KeystoneWriter(RecordWriter):
    def carried(self) -> tuple[Column, Column]:
        replaced = (envelope.HOPS, envelope.STREAM)
        kept = F.filter("headers", lambda h: ~h["key"].isin(*replaced))
        added = F.array(
            F.struct(
                F.lit(envelope.HOPS).alias("key"),
                (F.col("hops") + 1).cast("string").cast("binary").alias("value"),
            ),
            F.struct(
                F.lit(envelope.STREAM).alias("key"),
                F.lit(self.route.output.sink.stream).cast("binary").alias("value"),
            ),
        )
        return F.col("key"), F.concat(kept, added)

"""An output's filter and projection compiled to Spark columns over the source's columns
(`router.source`): the payload's struct of the paths read, the metadata, and the stream's key
for `hash`. What the router's queries, a backfill's and a shadow's all route with."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from keystone.contracts.spec import OutputSpec
from keystone.router.lang.parser import parse_filter, parse_projection
from keystone.router.lang.spark import Scope, compile_filter, compile_projection


def scope(key: bytes | None) -> Scope:
    metadata = {name: F.col(name) for name in ("guid", "timestamp", "host", "app")}
    return Scope(F.col("payload"), metadata, key)


def condition(output: OutputSpec, key: bytes | None) -> Column:
    """True exactly for the events the output's filter keeps (never null)."""
    parsed = parse_filter(output.filter) if output.filter else None
    return compile_filter(parsed, scope(key))


def record(output: OutputSpec, key: bytes | None) -> Column:
    """The output's record of the event, as JSON text."""
    projection = parse_projection(output.projection)
    return compile_projection(projection, F.col("value").cast("string"), scope(key))

"""A Hive output read back: its table's rows by guid, through Spark SQL."""

from __future__ import annotations

from collections import Counter

from keystone.contracts.names import HIVE_DATABASE
from keystone.router.sinks.readback import Copy, SinkReader


class HiveReader(SinkReader):
    @property
    def where(self) -> str:
        return f"table {HIVE_DATABASE}.{self.table}"

    @property
    def table(self) -> str:
        table = self.output.sink.table(self.spec.name, self.output.name)
        assert table is not None, "a Hive output's reader"
        return table

    def deliveries(self) -> Counter[Copy]:
        spark = self.spark
        assert spark is not None, "a Hive output is read with Spark"
        table = f"`{HIVE_DATABASE}`.`{self.table}`"
        if not spark.catalog.tableExists(table.replace("`", "")):
            return Counter()  # the router has not made it yet
        spark.catalog.refreshTable(table)  # partitions added by the router meanwhile
        rows = spark.sql(f"SELECT guid, count(*) AS n FROM {table} GROUP BY guid")
        return Counter({(row.guid, None): row.n for row in rows.collect()})

"""The `hive` sink's runtime parts: the Hive database provisioned (`provision`), the table and
its batch-keyed files (`table`), the writer (`writer`), read back by guid (`readback`). Its
config and descriptor: `keystone.contracts.sinks.hive`."""

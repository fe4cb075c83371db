"""The `kafka` sink's runtime parts: its topic provisioned (`provision`), its records written by
Spark's Kafka sink or in Kafka transactions (`writer`), read back by guid (`readback`). Its
config and descriptor: `keystone.contracts.sinks.kafka`."""

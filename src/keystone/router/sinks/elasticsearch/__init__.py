"""The `elasticsearch` sink's runtime parts: its index template provisioned (`provision`), its
documents written by guid through the bulk API (`writer`), read back by id (`readback`). Its
config and descriptor: `keystone.contracts.sinks.elasticsearch`."""

"""The `keystone` sink's runtime parts: its target stream's topic checked (`provision`), its
records written as the target stream's events (`writer`), read back by guid (`readback`). Its
config and descriptor: `keystone.contracts.sinks.keystone`."""

"""Where outputs deliver. A sink type has three parts: its config (`keystone.contracts.sinks`),
its provisioner (`provision`, no Spark) and its Spark writer (`base.Writer`, one module per
type), the last two listed in `registry`."""

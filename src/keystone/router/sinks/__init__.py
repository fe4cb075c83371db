"""Where outputs deliver: each sink type's runtime parts in a package of its own (`kafka`,
`keystone`, `hive`, `elasticsearch`: a provisioner without Spark, a Spark writer, a reader),
named by its descriptor (`keystone.contracts.sinks`), over the bases here (`provision`,
`base`, `readback`)."""

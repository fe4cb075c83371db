"""The control plane: stream, owner and app provisioning (REST and web UI over the registry
in Redis, whose writes are `store`'s), and the fleet that runs one router per stream.

Imports `keystone.contracts`, `keystone.dashboards` and the Spark-free parts of
`keystone.router` (the language's parser, topics, sinks' provisioners); never Spark.
"""

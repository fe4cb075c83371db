"""The embedded stack: real Kafka, Redis, Elasticsearch, a shared Hive metastore (on
PostgreSQL), Prometheus, the proxy and control, run on loopback under one state directory by
`keystone stack`; and the JVM artefacts it fetches and builds.

A development and test harness: imported only by the CLI's stack commands, the load test's
fault injector and tests. Imports `keystone.control` and below.
"""

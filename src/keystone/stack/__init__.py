"""The embedded stack: real Kafka, Redis, Elasticsearch, a shared Hive metastore (on
PostgreSQL) and Prometheus, run on loopback under one state directory by `keystone stack`."""

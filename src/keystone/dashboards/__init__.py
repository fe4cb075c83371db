"""Per-stream Grafana JSON, Prometheus alert rules and file-discovery targets, and the live
pages' data, generated from a stream's spec.

Imports `keystone.contracts` (and no Spark).
"""

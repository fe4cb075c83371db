"""The router: one Spark Structured Streaming application per stream (issue: router)."""

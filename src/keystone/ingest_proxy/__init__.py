"""The ingest proxy: producers' HTTP front door to the fronting Kafka topics (issue: proxy)."""

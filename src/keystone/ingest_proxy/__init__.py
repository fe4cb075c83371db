"""The ingest proxy: producers' HTTP front door to the fronting Kafka topics (stamps each event
and answers only once Kafka has it), and the client producers use.

Imports `keystone.contracts` only.
"""

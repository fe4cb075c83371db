"""What tests share: the test stack's handle, the API client, Kafka and process probes,
the browser, waiting. Fixtures stay in the conftest files; their helpers live here."""

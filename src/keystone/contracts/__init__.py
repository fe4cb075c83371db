"""The contracts every part shares: the stream spec and each sink's config, settings and
limits, names, errors, metric names, the event's envelope, the registry's keys and its reading,
and the pid files by which one part stops what another started.

Imports nothing else of the project, and neither Spark nor FastAPI, so any part (and any test)
can use it cheaply.
"""

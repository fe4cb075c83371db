"""The contracts every part shares: settings, errors, names, the stream spec, metric names.

Imports neither Spark nor FastAPI, so any part (and any test) can use it cheaply.
"""

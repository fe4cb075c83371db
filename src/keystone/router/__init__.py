"""The router: one Spark Structured Streaming application per stream (`python -m
keystone.router`), reading the fronting topic, filtering and projecting with the language
(`lang/`) and delivering through each output's sink (`sinks/`), with its live metrics.

Imports `keystone.contracts` only. Spark is imported by the modules that run in the router;
what control uses of the router (the language's parser, topics, sinks' provisioners and
registry) imports no Spark.
"""

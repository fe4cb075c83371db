"""Keystone: a multi-tenant event router on Apache Spark.

Producers post events to the ingest proxy, which writes them to a stream's fronting Kafka topic;
one Spark router per stream filters, projects and delivers them to each of the stream's outputs;
the control plane keeps the streams' specs, runs the routers, and serves the API, the CLI's
backend and the web UI. The packages, and what each may import (`make lint` checks it):

    cli            the `keystone` command                    imports anything below
    loadtest       load, audit, benchmarks, demo             loadtest's faults alone: stack
    stack          the embedded dev stack                    control and below
    control        API, UI, registry writes, the fleet       dashboards, router (no Spark), below
    dashboards     Grafana JSON, Prometheus rules, targets   router, ingest_proxy, contracts
    router         the Spark job; sinks; the language        contracts
    ingest_proxy   producers' HTTP front door                contracts
    contracts      spec, settings, names, errors, registry   nothing of the project
"""

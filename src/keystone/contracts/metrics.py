"""Prometheus metric names, the same in every component and dashboard."""

INGEST_EVENTS = "keystone_ingest_events_total"  # {stream, app, result}
INGEST_REQUEST_SECONDS = "keystone_ingest_request_seconds"  # {stream} histogram
INGEST_REGISTRY_FAILURES = "keystone_ingest_registry_failures_total"
INGEST_REGISTRY_VERSION = "keystone_ingest_registry_version"
ROUTER_EVENTS = "keystone_router_events_total"  # {stream, output, stage}
ROUTER_LAG = "keystone_router_lag_records"  # {stream, output}
DELIVERY_LATENCY_SECONDS = "keystone_delivery_latency_seconds"  # {stream, output} histogram
ROUTER_UP = "keystone_router_up"  # {stream}
ROUTER_QUERY_UP = "keystone_router_query_up"  # {stream, output}
# The size the router runs its micro-batches at now (it follows the fleet's as it runs).
ROUTER_SIZE = "keystone_router_sized_for_events_per_second"  # {stream}
# An exactly-once output's Kafka transactions: committed, or aborted (a batch attempt that failed).
ROUTER_TRANSACTIONS = "keystone_router_transactions_total"  # {stream, output, outcome}

# An output's shadow (contracts.shadows), compared event by event with the live output.
SHADOW_EVENTS = "keystone_shadow_events_total"  # {stream, output, result}: contracts.shadows.Result
# {stream, output, field}: events both versions keep with records that differ in the field
SHADOW_FIELD_DIFFERENCES = "keystone_shadow_field_differences_total"
SHADOW_RECORDS = "keystone_shadow_records_total"  # {stream, output, stage}: delivered|dead_letter
SHADOW_UP = "keystone_shadow_up"  # {stream, output}: 1 while its query runs
SHADOW_LAG = "keystone_shadow_lag_records"  # {stream, output}: behind the fronting topic's end

INGEST_RESULTS = ("accepted", "rejected", "failed")
ROUTER_STAGES = ("in", "matched", "delivered", "dead_letter")
TRANSACTION_OUTCOMES = ("committed", "aborted")

# The control service's own (its fleet of routers and its API).
CONTROL_ROUTERS = "keystone_control_routers"  # {state} routers in each state
CONTROL_ROUTER_RESTARTS = "keystone_control_router_restarts"  # {stream} gauge: restarts so far
CONTROL_REQUESTS = "keystone_control_requests_total"  # {method, route, status}
# {cluster}: 1 for the fronting cluster taking every stream's writes (contracts.fronting.Active)
CONTROL_FRONTING_ACTIVE = "keystone_control_fronting_active"
CONTROL_FRONTING_STREAMS = "keystone_control_fronting_streams"  # {cluster}: streams switched alone
CONTROL_FRONTING_SWITCHES = "keystone_control_fronting_switches_total"  # {from, to, reason}
# {cluster}: when the writes last moved (epoch seconds), labelled with the cluster taking them
CONTROL_FRONTING_SINCE = "keystone_control_fronting_since"
# Each output's latest rewind, as control's registry and the output's checkpoint say per scrape.
REWIND_REMAINING = "keystone_rewind_remaining_records"  # {stream, output} gauge: still to replay
REWIND_STARTED = "keystone_rewind_started_seconds"  # {stream, output} gauge: when it was asked

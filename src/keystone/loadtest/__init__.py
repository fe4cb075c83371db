"""Load generation, the guid-by-guid delivery audit, fault injection, reports, the demo and
the benchmarks (`python -m keystone.loadtest.<name>_bench`).

Imports anything below the CLI; `keystone.stack` only in `faults`, which restarts the embedded
stack's services.
"""

"""Load generation, the guid-by-guid delivery audit and benchmarks (issue: load test)."""

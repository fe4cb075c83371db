"""Per-stream Grafana JSON, Prometheus rules and live pages (issue: dashboards)."""

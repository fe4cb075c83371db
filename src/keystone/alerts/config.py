"""Alertmanager's configuration, made from the registry's receivers (pure: no I/O).

- Every alert of a stream carries its `stream`, `owner` and `severity` labels
  (`dashboards.rules`); notifications are grouped by stream and alert.
- The admin's receiver (`alert_admin_webhook`, or one that sends nowhere) hears every alert;
  each owner's receivers hear their own streams' alerts, and no other's.
- A stream whose router is down has its derived alerts (lag, delivery rate) inhibited: one
  notification for one cause.
- A receiver follows no redirect, and goes through `alert_receiver_proxy` where one is set
  (`keystone.alerts.targets`).
"""

from __future__ import annotations

from typing import Any

import yaml

from keystone.contracts.receivers import Receiver, ReceiverKind
from keystone.contracts.settings import Settings
from keystone.dashboards.rules import DELIVERY_RATE_LOW, LAG_GROWING, ROUTER_DOWN

ADMIN = "keystone-admin"
# Alerts that follow from a router being down, inhibited while it is.
DERIVED = (LAG_GROWING, DELIVERY_RATE_LOW)


def receiver_name(owner: str) -> str:
    """The Alertmanager receiver that holds an owner's receivers."""
    return f"owner-{owner}"


def config(settings: Settings, receivers: list[Receiver]) -> dict[str, Any]:
    owners = sorted({r.owner for r in receivers})
    routes: list[dict[str, Any]] = [{"receiver": ADMIN, "continue": True}]
    routes += [{"receiver": receiver_name(o), "matchers": [matcher("owner", o)]} for o in owners]
    made: dict[str, Any] = {
        "route": {
            "receiver": ADMIN,
            "group_by": ["stream", "alertname"],
            "group_wait": _seconds(settings.alert_group_wait_seconds),
            "group_interval": _seconds(settings.alert_group_interval_seconds),
            "repeat_interval": _seconds(settings.alert_repeat_interval_seconds),
            "routes": routes,
        },
        "inhibit_rules": [
            {
                "source_matchers": [f'alertname="{ROUTER_DOWN}"'],
                "target_matchers": [f'alertname=~"{"|".join(DERIVED)}"'],
                "equal": ["stream"],
            }
        ],
        "receivers": [_admin(settings)]
        + [_owner(settings, o, [r for r in receivers if r.owner == o]) for o in owners],
    }
    if settings.smtp_smarthost:
        made["global"] = {
            "smtp_smarthost": settings.smtp_smarthost,
            "smtp_from": settings.smtp_from,
            "smtp_require_tls": settings.smtp_require_tls,
            **({"smtp_auth_username": settings.smtp_username} if settings.smtp_username else {}),
            **(
                {"smtp_auth_password": settings.smtp_password.get_secret_value()}
                if settings.smtp_password.get_secret_value()
                else {}
            ),
        }
    return made


def config_yaml(settings: Settings, receivers: list[Receiver]) -> str:
    return yaml.safe_dump(config(settings, receivers), sort_keys=False, width=1000)


def _admin(settings: Settings) -> dict[str, Any]:
    url = settings.alert_admin_webhook.get_secret_value()
    if not url:
        return {"name": ADMIN}  # shown on the dashboards, sent nowhere
    return {"name": ADMIN, "webhook_configs": [_webhook(settings, url, send_resolved=True)]}


def _owner(settings: Settings, owner: str, receivers: list[Receiver]) -> dict[str, Any]:
    made: dict[str, Any] = {"name": receiver_name(owner)}
    for r in receivers:
        if r.kind is ReceiverKind.WEBHOOK:
            made.setdefault("webhook_configs", []).append(
                _webhook(settings, r.url, r.send_resolved)
            )
        elif r.kind is ReceiverKind.SLACK:
            slack = {
                "api_url": r.url,
                "send_resolved": r.send_resolved,
                "http_config": _http(settings),
                "title": "{{ .CommonLabels.alertname }}: {{ .CommonLabels.stream }}",
                "text": "{{ range .Alerts }}{{ .Annotations.summary }} "
                "({{ .Annotations.dashboard }})\n{{ end }}",
            }
            if r.channel:
                slack["channel"] = r.channel
            made.setdefault("slack_configs", []).append(slack)
        else:
            made.setdefault("email_configs", []).append(
                {"to": r.to, "send_resolved": r.send_resolved}
            )
    return made


def _webhook(settings: Settings, url: str, send_resolved: bool) -> dict[str, Any]:
    return {"url": url, "send_resolved": send_resolved, "http_config": _http(settings)}


def _http(settings: Settings) -> dict[str, Any]:
    """How a receiver's request goes out: never following a redirect, through the egress
    proxy where settings name one (`keystone.alerts.targets`)."""
    made: dict[str, Any] = {"follow_redirects": False}
    if settings.alert_receiver_proxy:
        made["proxy_url"] = settings.alert_receiver_proxy
    return made


def _seconds(value: float) -> str:
    return f"{max(1, round(value))}s"


def matcher(name: str, value: str) -> str:
    """An equality matcher, its value quoted (owner names hold neither quote nor backslash,
    but a matcher is no place to find out)."""
    quoted = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'{name}="{quoted}"'

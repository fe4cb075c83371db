"""Alertmanager's configuration as control makes it, checked by the real `amtool`; where a
webhook may send; and one owner's bad receiver leaving every other owner's published. The
real Alertmanager notifying: tests/alerts/test_notifications.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from keystone.alerts import publish
from keystone.alerts.config import ADMIN, config, config_yaml
from keystone.alerts.publish import AlertPublisher, check
from keystone.alerts.targets import check_webhook
from keystone.contracts.errors import Unprocessable
from keystone.contracts.receivers import Receiver
from keystone.contracts.settings import Settings

SECRET = "https://hooks.example.com/services/T0/B0/s3cr3t"


def receivers() -> list[Receiver]:
    return [
        Receiver(name="hook", owner="team-a", kind="webhook", url="https://8.8.8.8/a"),
        Receiver(name="chat", owner="team-a", kind="slack", url=SECRET, channel="#a"),
        Receiver(name="mail", owner="team-b", kind="email", to="b@example.com"),
    ]


def test_each_owner_hears_their_own_and_the_admin_every_alert() -> None:
    settings = Settings(smtp_smarthost="smtp.example.com:587", smtp_from="ks@example.com")
    made = config(settings, receivers())
    route = made["route"]
    assert route["receiver"] == ADMIN and route["group_by"] == ["stream", "alertname"]
    assert route["routes"] == [
        {"receiver": ADMIN, "continue": True},
        {"receiver": "owner-team-a", "matchers": ['owner="team-a"']},
        {"receiver": "owner-team-b", "matchers": ['owner="team-b"']},
    ]
    (inhibit,) = made["inhibit_rules"]
    assert inhibit["source_matchers"] == ['alertname="KeystoneRouterDown"']
    assert inhibit["equal"] == ["stream"]
    team_a = next(r for r in made["receivers"] if r["name"] == "owner-team-a")
    for sender in team_a["webhook_configs"] + team_a["slack_configs"]:
        assert sender["http_config"] == {"follow_redirects": False}
    assert made["global"]["smtp_smarthost"] == "smtp.example.com:587"
    assert check(config_yaml(settings, receivers())) is None  # amtool passes it


def test_a_webhook_reaches_only_global_addresses_and_the_networks_allowed() -> None:
    settings = Settings()
    lookup = {"mixed.example": ["8.8.8.8", "10.0.0.7"], "public.example": ["8.8.4.4"]}
    check_webhook(settings, "https://public.example/x", lookup.__getitem__)
    with pytest.raises(Unprocessable) as refused:  # one address inside is one too many
        check_webhook(settings, "https://mixed.example/x", lookup.__getitem__)
    assert refused.value.details == {"setting": "alert_receiver_networks"}
    assert "10.0.0.7, a private address" in refused.value.message
    for url in ("https://169.254.169.254/", "https://[::1]/", "https://127.0.0.1:8/"):
        with pytest.raises(Unprocessable, match="alert_receiver_networks"):
            check_webhook(settings, url, lambda host: [host])
    with pytest.raises(Unprocessable, match="alert_receiver_schemes"):
        check_webhook(settings, "http://8.8.8.8/", lambda host: [host])
    allowed = Settings(alert_receiver_schemes="http,https", alert_receiver_networks="10.0.0.0/8")
    check_webhook(allowed, "http://mixed.example/x", lookup.__getitem__)


def test_a_receiver_that_does_not_pass_is_left_out_and_every_other_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(state_dir=tmp_path, alertmanager_url="http://127.0.0.1:9")
    publisher = AlertPublisher(settings, lookup=lambda host: ["8.8.8.8"])
    monkeypatch.setattr(publisher, "_reload", lambda: None)
    real = publish.check

    def refusing_team_a(text: str) -> str | None:  # as amtool would refuse one of its parts
        return f"bad url {SECRET}" if "owner-team-a" in text else real(text)

    monkeypatch.setattr(publish, "check", refusing_team_a)
    settings_with_mail = [r for r in receivers() if r.owner == "team-a"] + [
        Receiver(name="hook", owner="team-c", kind="webhook", url="https://8.8.8.8/c")
    ]
    assert publisher.sync(settings_with_mail)
    written = yaml.safe_load(settings.alertmanager_config_file.read_text())
    assert [r["name"] for r in written["receivers"]] == [ADMIN, "owner-team-c"]
    assert set(publisher.failures) == {"team-a/hook", "team-a/chat"}
    assert SECRET not in " ".join(publisher.failures.values())  # said without the secret
    assert "https://hooks.example.com/…" in publisher.failures["team-a/chat"]
    assert settings.alertmanager_config_file.stat().st_mode & 0o077 == 0  # its owner's only
    assert not publisher.sync(settings_with_mail)  # unchanged: not written again

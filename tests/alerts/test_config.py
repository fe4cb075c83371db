"""Alertmanager's configuration as control makes it, checked by the real `amtool`; where a
webhook may send; one receiver that does not pass leaving every other published; every peer
reloaded; receivers registered within the caller's rights and limits. The real Alertmanager
notifying: tests/alerts/test_notifications.py."""

from __future__ import annotations

import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from keystone.alerts import publish
from keystone.alerts.config import ADMIN, config, config_yaml
from keystone.alerts.publish import AlertPublisher, alertmanager_service, check
from keystone.alerts.targets import check_webhook
from keystone.contracts.errors import Forbidden, LimitExceeded, Unavailable, Unprocessable
from keystone.contracts.processes import PidFile
from keystone.contracts.receivers import Receiver
from keystone.contracts.settings import Settings
from keystone.control.models import ReceiverCreate
from keystone.control.receivers import Receivers
from keystone.control.tenancy import Caller

SECRET = "https://hooks.example.com/services/T0/B0/s3cr3t"


def receivers() -> list[Receiver]:
    return [
        Receiver(name="hook", owner="team-a", kind="webhook", url="https://8.8.8.8/a"),
        Receiver(name="chat", owner="team-a", kind="slack", url=SECRET, channel="#a"),
        Receiver(name="mail", owner="team-b", kind="email", to="b@example.com"),
    ]


def test_each_owner_hears_their_own_and_the_admin_every_alert() -> None:
    settings = Settings(
        smtp_smarthost="smtp.example.com:587",
        smtp_from="ks@example.com",
        alert_receiver_proxy="http://egress.internal:3128",
    )
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
        assert sender["http_config"] == {
            "follow_redirects": False,
            "proxy_url": "http://egress.internal:3128",
        }
    assert made["global"]["smtp_smarthost"] == "smtp.example.com:587"
    assert check(config_yaml(settings, receivers())) is None  # amtool passes it


def test_a_webhook_reaches_only_global_addresses_ports_and_networks_allowed() -> None:
    settings = Settings()
    lookup = {"mixed.example": ["8.8.8.8", "10.0.0.7"], "public.example": ["8.8.4.4"]}
    check_webhook(settings, "https://public.example/x", lookup.__getitem__)
    with pytest.raises(Unprocessable) as refused:  # one address inside is one too many
        check_webhook(settings, "https://mixed.example/x", lookup.__getitem__)
    assert refused.value.details == {"setting": "alert_receiver_networks"}
    assert "10.0.0.7" not in refused.value.message  # no map of the platform's names
    inside = [
        "169.254.169.254",
        "::1",
        "127.0.0.1",
        "::ffff:127.0.0.1",  # mapped
        "::127.0.0.1",  # compatible
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
        "2002:a9fe:a9fe::",  # 6to4 of it
    ]
    for address in inside:
        with pytest.raises(Unprocessable, match="alert_receiver_networks"):
            check_webhook(settings, "https://host.example/", lambda host, a=address: [a])
    with pytest.raises(Unprocessable, match="alert_receiver_schemes"):
        check_webhook(settings, "http://8.8.8.8/", lambda host: [host])
    with pytest.raises(Unprocessable, match="alert_receiver_ports"):
        check_webhook(settings, "https://8.8.8.8:22/", lambda host: [host])
    for unread in (
        "https://8.8.8.8/a b",
        "https://8.8.8.8/%zz",
        "https://[::1/x",
        "https://8.8.8.8:x/",
    ):
        with pytest.raises(Unprocessable):
            check_webhook(settings, unread, lambda host: [host])
    allowed = Settings(
        alert_receiver_schemes="http,https",
        alert_receiver_networks="10.0.0.0/8",
        alert_receiver_ports="80,8000-9000",
    )
    check_webhook(allowed, "http://mixed.example/x", lookup.__getitem__)
    check_webhook(allowed, "https://8.8.8.8:8443/x", lambda host: [host])


def test_a_receiver_that_does_not_pass_is_left_out_and_every_other_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(state_dir=tmp_path, alertmanager_url="http://127.0.0.1:9")
    publisher = AlertPublisher(settings, lookup=lambda host: ["8.8.8.8"])
    monkeypatch.setattr(publisher, "_reload", lambda: None)
    real = publish.check
    asked: list[str] = []

    def refusing_chat(text: str) -> str | None:  # as amtool would refuse one receiver
        asked.append(text)
        return "bad url <url>" if "s3cr3t" in text else real(text)

    monkeypatch.setattr(publish, "check", refusing_chat)
    given = [
        *receivers()[:2],
        Receiver(name="hook", owner="team-c", kind="webhook", url="https://8.8.8.8/c"),
    ]
    assert publisher.sync(given)
    written = yaml.safe_load(settings.alertmanager_config_file.read_text())
    owners = {r["name"]: r for r in written["receivers"]}
    assert set(owners) == {ADMIN, "owner-team-a", "owner-team-c"}
    assert len(owners["owner-team-a"]["webhook_configs"]) == 1  # its other receiver published
    assert publisher.failures == {"team-a/chat": "bad url <url>"}
    assert settings.alertmanager_config_file.stat().st_mode & 0o077 == 0  # its owner's only
    asked.clear()
    assert not publisher.sync(given)  # unchanged: neither written nor checked again
    assert asked == []


def test_amtools_words_are_given_without_the_url(tmp_path: Path) -> None:
    bad = {
        "route": {"receiver": "a"},
        "receivers": [{"name": "a", "webhook_configs": [{"url": f"{SECRET}/%zz"}]}],
    }
    said = check(yaml.safe_dump(bad))
    assert said is not None and "invalid URL escape" in said and "s3cr3t" not in said


def test_every_peer_is_asked_to_reload_whichever_is_not_running(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, alertmanager_replicas=2)
    second = subprocess.Popen(["sleep", "60"])
    try:
        PidFile(settings.run_dir / f"{alertmanager_service(2)}.pid").write(second.pid)
        publisher = AlertPublisher(settings)
        with pytest.raises(Unavailable, match="alertmanager is not running"):
            publisher._reload()
        assert second.wait(timeout=10) == -signal.SIGHUP  # the second was asked all the same
    finally:
        second.kill()


@dataclass
class FakeRecords:
    added: list[Receiver] = field(default_factory=list)

    def add(self, receiver: Receiver, audit: dict[str, Any], within_limit: Any) -> None:
        within_limit(self.added)
        self.added.append(receiver)


@dataclass
class FakeStore:
    receiver_records: FakeRecords = field(default_factory=FakeRecords)


def test_an_owner_registers_their_own_within_the_limit_and_the_settings(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, max_receivers_per_owner=1)
    store = FakeStore()
    plane = Receivers(settings, store, lambda host: ["8.8.8.8"], clock=lambda: 5.0)  # type: ignore[arg-type]
    team = Caller(name="team-a", admin=False)
    hook = Receiver(name="hook", owner="", kind="webhook", url="https://8.8.8.8/x")
    made = plane.add(team, hook)
    assert (made.owner, made.created) == ("team-a", 5.0)  # the caller's, whatever was given
    with pytest.raises(LimitExceeded, match="max_receivers_per_owner"):
        plane.add(team, hook.model_copy(update={"name": "two"}))
    with pytest.raises(Forbidden):
        plane.add(Caller(name="admin", admin=True), hook)
    mail = Receiver(name="mail", owner="", kind="email", to="a@example.com")
    with pytest.raises(Unprocessable) as refused:
        plane.add(team, mail)
    assert refused.value.details == {"setting": "smtp_smarthost"}
    templated = mail.model_copy(update={"to": "{{ .ExternalURL }}@x.y"})
    with pytest.raises(Unprocessable, match="not one e-mail address"):
        plane.add(team, templated)


def test_a_receivers_address_is_bounded_before_anything_reads_it() -> None:
    too_long = {"name": "mail", "kind": "email", "to": "a" * 300 + "@example.com"}
    with pytest.raises(ValidationError):
        ReceiverCreate.model_validate(too_long)
    hook = {"name": "hook", "kind": "webhook", "url": "https://8.8.8.8/" + "a" * 3000}
    with pytest.raises(ValidationError):
        ReceiverCreate.model_validate(hook)

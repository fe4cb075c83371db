"""Every Kafka client's configuration comes from `contracts.kafka_clients`, and says the same
connection in each client kind's words."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from keystone.contracts import kafka_clients
from keystone.contracts.errors import BadRequest, Conflict
from keystone.contracts.settings import Settings
from keystone.control.kafka_access import AppAccess
from keystone.ingest_proxy.client import DirectProducer
from keystone.router.spark import spark_conf
from keystone.stack.kafka_security import PRINCIPALS

SRC = Path(kafka_clients.__file__).parents[1]


def secured(tmp_path: Path, **more: object) -> Settings:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    given: dict[str, object] = {
        "kafka_bootstrap": "broker:9094",
        "kafka_security_protocol": "SASL_SSL",
        "kafka_sasl_username": "router",
        "kafka_sasl_password": 'pa"ss\\word',
        "kafka_ssl_ca_file": str(ca),
    }
    return Settings(**(given | more))  # type: ignore[arg-type]


def test_plaintext_is_the_bootstrap_servers_alone() -> None:
    settings = Settings(kafka_bootstrap="broker:9092")
    connection = {"bootstrap.servers": "broker:9092", "security.protocol": "PLAINTEXT"}
    assert kafka_clients.librdkafka(settings) == connection
    assert kafka_clients.java(settings) == connection
    assert kafka_clients.spark_options(settings) == {
        "kafka.bootstrap.servers": "broker:9092",
        "kafka.security.protocol": "PLAINTEXT",
    }


def test_sasl_over_tls_in_librdkafkas_words(tmp_path: Path) -> None:
    settings = secured(tmp_path)
    assert kafka_clients.librdkafka(settings) == {
        "bootstrap.servers": "broker:9094",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "router",
        "sasl.password": 'pa"ss\\word',
        "ssl.ca.location": str(tmp_path / "ca.pem"),
    }


def test_sasl_over_tls_in_kafka_clients_words_with_the_login_quoted(tmp_path: Path) -> None:
    java = kafka_clients.java(secured(tmp_path, kafka_sasl_mechanism="SCRAM-SHA-256"))
    assert java["sasl.mechanism"] == "SCRAM-SHA-256"
    assert java["sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="router" password="pa\\"ss\\\\word";'
    )
    assert java["ssl.truststore.type"] == "PEM"
    assert java["ssl.truststore.location"] == str(tmp_path / "ca.pem")
    assert kafka_clients.spark_options(secured(tmp_path)) == {
        f"kafka.{k}": v for k, v in kafka_clients.java(secured(tmp_path)).items()
    }


def test_a_password_file_is_read_by_each_client_made(tmp_path: Path) -> None:
    password = tmp_path / "password"
    password.write_text("first\n")
    settings = secured(tmp_path, kafka_sasl_password="", kafka_sasl_password_file=str(password))
    assert kafka_clients.librdkafka(settings)["sasl.password"] == "first"
    password.write_text("rotated\n")
    assert kafka_clients.librdkafka(settings)["sasl.password"] == "rotated"
    assert 'password="rotated"' in kafka_clients.java(settings)["sasl.jaas.config"]


def test_a_client_certificate_reaches_kafka_clients_as_values(tmp_path: Path) -> None:
    (tmp_path / "me.pem").write_text("CERT")
    (tmp_path / "me.key").write_text("KEY")
    settings = Settings(
        kafka_bootstrap="broker:9093",
        kafka_security_protocol="SSL",
        kafka_ssl_certificate_file=str(tmp_path / "me.pem"),
        kafka_ssl_key_file=str(tmp_path / "me.key"),
        kafka_ssl_key_password="k",
    )
    assert kafka_clients.librdkafka(settings) == {
        "bootstrap.servers": "broker:9093",
        "security.protocol": "SSL",
        "ssl.certificate.location": str(tmp_path / "me.pem"),
        "ssl.key.location": str(tmp_path / "me.key"),
        "ssl.key.password": "k",
    }
    java = kafka_clients.java(settings)
    assert (java["ssl.keystore.certificate.chain"], java["ssl.keystore.key"]) == ("CERT", "KEY")
    assert "sasl.jaas.config" not in java


def test_every_secret_key_is_one_spark_redacts(tmp_path: Path) -> None:
    (tmp_path / "me.pem").write_text("CERT")
    (tmp_path / "me.key").write_text("KEY")
    settings = secured(
        tmp_path,
        kafka_sasl_password="sasl-password",
        kafka_ssl_certificate_file=str(tmp_path / "me.pem"),
        kafka_ssl_key_file=str(tmp_path / "me.key"),
        kafka_ssl_key_password="key-password",
    )
    secrets = ("sasl-password", "KEY", "key-password")
    # What routers are started with: Spark shows an option's value as "*********(redacted)"
    # when its key matches.
    redacted = re.compile(spark_conf(settings, "router")["spark.sql.redaction.options.regex"])
    options = kafka_clients.spark_options(settings)
    holding = [k for k, v in options.items() if any(secret in v for secret in secrets)]
    assert len(holding) == 3, holding  # the login, the key and its password
    for key in holding:
        assert redacted.search(key), f"Spark's option {key} holds a secret, unredacted"
    assert redacted.search("kafka.bootstrap.servers") is None  # the rest shown as it is


def _string_literals(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def _settings_with_a_bootstrap(path: Path) -> list[int]:
    """Lines that make settings with bootstrap servers of their own: an embedded secured
    Kafka's login and CA are then not derived."""
    tree = ast.parse(path.read_text())
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and any(k.arg == "kafka_bootstrap" for k in node.keywords)
    ]


def test_no_client_outside_kafka_clients_names_its_own_connection() -> None:
    """A client that set `bootstrap.servers` (or Spark's `kafka.bootstrap.servers`, or Flink's
    `properties.bootstrap.servers`) itself would connect without the settings' security, and
    so would one of settings made with their own servers. Allowed: a broker's health check,
    which replaces the servers of a connection made here, and the class archive's training
    run, which connects nowhere."""
    allowed = {("stack/services.py", 1), ("stack/cds.py", 2)}  # (file, how many)
    found: dict[str, int] = {}
    for path in SRC.rglob("*.py"):
        if path.name == "kafka_clients.py":
            continue
        name = path.relative_to(SRC).as_posix()
        for _line, text in _string_literals(path):
            client = text in ("bootstrap.servers", "kafka.bootstrap.servers")
            if client or "properties.bootstrap.servers" in text:
                found[name] = found.get(name, 0) + 1
        for _line in _settings_with_a_bootstrap(path):
            found[name] = found.get(name, 0) + 1
    assert set(found.items()) == allowed
    for path in SRC.rglob("*.java"):  # the Java writer takes its whole configuration given
        assert 'put("bootstrap.servers"' not in path.read_text(), path


def test_the_embedded_secured_kafka_is_logged_in_to_as_the_user_named(tmp_path: Path) -> None:
    admin = Settings(state_dir=tmp_path, kafka_security="sasl_ssl")
    assert admin.kafka_security_protocol == "SASL_SSL"
    assert admin.kafka_ssl_ca_file == str(admin.kafka_tls_dir / "ca.pem")
    assert admin.kafka_sasl_username == "admin"
    assert admin.kafka_sasl_password_file == str(admin.kafka_password_file("admin"))
    router = Settings(state_dir=tmp_path, kafka_security="sasl_ssl", kafka_sasl_username="router")
    assert router.kafka_sasl_password_file == str(router.kafka_password_file("router"))
    assert Settings(state_dir=tmp_path).kafka_principal_env("router") == {}  # plaintext


def test_a_child_started_as_a_service_user_logs_in_with_its_file_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = Settings(
        state_dir=tmp_path, kafka_security="sasl_ssl", kafka_sasl_password="given-to-the-parent"
    )
    for name, value in (parent.to_env() | parent.kafka_principal_env("proxy")).items():
        monkeypatch.setenv(name, value)
    child = Settings()
    (tmp_path / "conf" / "kafka" / "users").mkdir(parents=True)
    child.kafka_password_file("proxy").write_text("the-proxys")
    login = kafka_clients.librdkafka(child)
    assert (login["sasl.username"], login["sasl.password"]) == ("proxy", "the-proxys")


def test_control_issues_app_credentials_only_where_kafka_takes_scram(tmp_path: Path) -> None:
    assert kafka_clients.scram(secured(tmp_path))
    assert kafka_clients.scram(secured(tmp_path, kafka_sasl_mechanism="SCRAM-SHA-256"))
    assert not kafka_clients.scram(secured(tmp_path, kafka_sasl_mechanism="PLAIN"))
    assert not kafka_clients.scram(secured(tmp_path, kafka_security_protocol="SSL"))
    plaintext = Settings(kafka_bootstrap="broker:9092")
    assert not kafka_clients.scram(plaintext)
    access = AppAccess(plaintext, None)  # type: ignore[arg-type]  # no store may be read
    with pytest.raises(Conflict, match="control issues no Kafka credentials here"):
        access.require()
    access.sync()  # nothing to do, nothing touched
    # Control manages apps' users on the embedded secured Kafka, on another only if told to.
    embedded = Settings(state_dir=tmp_path, kafka_security="sasl_ssl")
    assert embedded.kafka_app_users and AppAccess(embedded, None).enabled  # type: ignore[arg-type]
    assert not secured(tmp_path).kafka_app_users
    assert secured(tmp_path, kafka_app_users=True).kafka_app_users
    # No app's user is a service's: the services' users have no such prefix.
    assert all(not p.startswith(kafka_clients.APP_USER_PREFIX) for p in PRINCIPALS)
    assert kafka_clients.app_user("x") == "keystone-app-x"


def test_the_honest_direct_producer_names_its_own_app_only(tmp_path: Path) -> None:
    settings = secured(
        tmp_path, kafka_security_protocol="SASL_PLAINTEXT", kafka_sasl_username="keystone-app-mine"
    )
    connection = kafka_clients.librdkafka(settings)
    with pytest.raises(BadRequest, match="as that app only"):
        DirectProducer(connection, "someone-else")
    DirectProducer(connection, "mine")  # made; it connects only when it sends

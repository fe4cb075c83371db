"""The embedded Kafka secured (`KEYSTONE_KAFKA_SECURITY=sasl_ssl`): its certificates, its users
and what each service's user may do.

- **TLS**: a CA made once into `<state_dir>/conf/kafka/tls` (openssl), and the brokers'
  certificate signed by it, for the loopback addresses. Clients trust that CA
  (`kafka_ssl_ca_file`). The controllers' listener takes TLS with a certificate of that CA
  only: the brokers are its only clients.
- **SASL/SCRAM-SHA-512 users**, made with the cluster's metadata when the storage is formatted
  (their passwords reach the formatting tool on its standard input, never its argv):
  `broker` (between brokers), `admin` (the `keystone` command, the tests and benchmarks),
  `control`, `router` (routers, backfills and redrives) and `proxy`, each password a file of
  `<state_dir>/conf/kafka/users` readable by its owner only.
- **ACLs** (the KRaft `StandardAuthorizer`; nothing is allowed that no ACL allows): `broker` and
  `admin` are super users; the others get what `SERVICE_USERS` grants them.
"""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from keystone.contracts import kafka_clients
from keystone.contracts.errors import StackError
from keystone.contracts.names import fronting_topic
from keystone.contracts.settings import Settings, stored_secret

MECHANISM = "SCRAM-SHA-512"
PRINCIPALS = ("broker", "admin", "control", "router", "proxy")
BROKER_SUBJECT = "CN=keystone-broker"  # the brokers' certificate: their name on the controllers
SUPER_USERS = ("User:broker", "User:admin", f"User:{BROKER_SUBJECT}")
FRONTING_PREFIX = fronting_topic("xx")[: -len("xx")]  # every stream's fronting and dead letters

Grant = tuple[ResourceType, str, ResourcePatternType, AclOperation]
_ANY, _PREFIX = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
_TOPIC, _GROUP, _CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.BROKER
_TRANSACTION = ResourceType.TRANSACTIONAL_ID
_Op = AclOperation


@dataclass(frozen=True)
class ServiceUser:
    """A service's Kafka user: what it does with Kafka, so what it is granted (and no more)."""

    name: str
    does: str
    grants: tuple[Grant, ...]


SERVICE_USERS = (
    ServiceUser(
        "proxy",
        "writes events to fronting topics, idempotently",
        (
            (_TOPIC, FRONTING_PREFIX, _PREFIX, _Op.WRITE),
            (_TOPIC, FRONTING_PREFIX, _PREFIX, _Op.DESCRIBE),
            (_CLUSTER, "kafka-cluster", _ANY, _Op.IDEMPOTENT_WRITE),
        ),
    ),
    ServiceUser(
        "router",
        "routers, backfills and redrives: read fronting topics; write outputs (any topic an "
        "owner's Kafka output names, which control checked), dead letters and other streams' "
        "fronting topics (Keystone outputs), in transactions for exactly-once outputs, whose "
        "positions are a group's",
        (
            *((_TOPIC, "*", _ANY, op) for op in (_Op.READ, _Op.WRITE, _Op.DESCRIBE, _Op.CREATE)),
            *((_GROUP, "*", _ANY, op) for op in (_Op.READ, _Op.DESCRIBE)),
            *((_TRANSACTION, "*", _ANY, op) for op in (_Op.WRITE, _Op.DESCRIBE)),
            (_CLUSTER, "kafka-cluster", _ANY, _Op.IDEMPOTENT_WRITE),
        ),
    ),
    ServiceUser(
        "control",
        "provisions, alters and deletes topics, reads them (previews, dead letters, positions) "
        "and moves groups (rewinds)",
        (
            *(
                (_TOPIC, "*", _ANY, op)
                for op in (
                    _Op.CREATE,
                    _Op.DELETE,
                    _Op.ALTER,
                    _Op.ALTER_CONFIGS,
                    _Op.DESCRIBE,
                    _Op.DESCRIBE_CONFIGS,
                    _Op.READ,
                )
            ),
            *((_GROUP, "*", _ANY, op) for op in (_Op.READ, _Op.DESCRIBE, _Op.DELETE)),
            (_CLUSTER, "kafka-cluster", _ANY, _Op.DESCRIBE),
        ),
    ),
)


def secured(settings: Settings) -> bool:
    return settings.is_embedded("kafka") and settings.kafka_security == "sasl_ssl"


def passwords(settings: Settings) -> dict[str, str]:
    """Each user's password, made once."""
    found = {}
    for principal in PRINCIPALS:
        password = stored_secret(settings.kafka_password_file(principal), create=True)
        assert password is not None, "made when missing"
        found[principal] = password
    return found


def scram_users(settings: Settings) -> str:
    """The formatting tool's `--add-scram` values, a line each (for its standard input)."""
    return "".join(
        f"{MECHANISM}=[name={principal},password={password}]\n"
        for principal, password in passwords(settings).items()
    )


def make_certificates(settings: Settings) -> None:
    """The CA and the brokers' certificate and key store, each made once."""
    tls = settings.kafka_tls_dir
    tls.mkdir(parents=True, exist_ok=True)
    tls.chmod(0o700)
    if not (tls / "ca.pem").exists():
        _openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
            "-subj", "/CN=keystone-embedded-ca",
            "-keyout", tls / "ca.key", "-out", tls / "ca.pem",
        )  # fmt: skip
    if (tls / "broker-keystore.pem").exists():
        return
    hosts = sorted({settings.bind_host, "127.0.0.1"})
    names = ",".join([*(f"IP:{h}" for h in hosts), "DNS:localhost"])
    with tempfile.TemporaryDirectory(dir=tls) as work:
        request, extensions = Path(work) / "broker.csr", Path(work) / "ext.cnf"
        extensions.write_text(f"subjectAltName={names}\nextendedKeyUsage=serverAuth,clientAuth\n")
        _openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/{BROKER_SUBJECT}",
            "-keyout", tls / "broker.key", "-out", request,
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", request, "-CA", tls / "ca.pem", "-CAkey", tls / "ca.key",
            "-CAcreateserial", "-days", "825", "-extfile", extensions,
            "-out", tls / "broker.pem",
        )  # fmt: skip
    # Kafka's PEM key store: the key, then the certificate chain, in one file.
    store = tls / "broker-keystore.pem"
    store.touch(mode=0o600)
    store.write_text((tls / "broker.key").read_text() + (tls / "broker.pem").read_text())


def broker_properties(settings: Settings, host: str, client: int, controller: int) -> dict:
    """The listeners' part of a secured broker's server.properties."""
    tls = settings.kafka_tls_dir
    login = kafka_clients.LOGIN_MODULES[MECHANISM]
    password = passwords(settings)["broker"]
    return {
        "listeners": f"SASL_SSL://{host}:{client},CONTROLLER://{host}:{controller}",
        "advertised.listeners": f"SASL_SSL://{host}:{client}",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SSL",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config": (
            f'{login} required username="broker" password="{password}";'
        ),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls / "broker-keystore.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls / "ca.pem"),
        # The controllers take the brokers' certificate only.
        "listener.name.controller.ssl.client.auth": "required",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": ";".join(SUPER_USERS),
    }


def grant_services(settings: Settings) -> None:
    """Creates every service user's ACLs (Kafka keeps an ACL made twice once)."""
    bindings = [
        AclBinding(kind, name, pattern, f"User:{user.name}", "*", op, AclPermissionType.ALLOW)
        for user in SERVICE_USERS
        for kind, name, pattern, op in user.grants
    ]
    admin = AdminClient(kafka_clients.librdkafka(settings))
    for binding, future in admin.create_acls(bindings, request_timeout=30).items():
        try:
            future.result()
        except Exception as e:
            raise StackError(f"Kafka refused the ACL {binding}: {e}") from e


def _openssl(*args: str | Path) -> None:
    result = subprocess.run(
        ["openssl", *map(str, args)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise StackError(f"openssl {args[0]} failed: {result.stderr.strip()}")

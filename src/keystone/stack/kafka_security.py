"""The embedded Kafka secured (`KEYSTONE_KAFKA_SECURITY=sasl_ssl`): its certificates, its users
and what each service's user may do.

- **TLS**: the brokers' certificate for the stack's addresses, and the CA that signed it
  (openssl, into `<state_dir>/conf/kafka/tls`; the CA's key is gone once it has signed).
  Clients trust that CA (`kafka_ssl_ca_file`). The controllers' listener takes TLS with a
  certificate of that CA only: the brokers are its only clients.
- **SASL/SCRAM-SHA-512 users**, made with the cluster's metadata when the storage is formatted
  (their passwords reach the formatting tool on its standard input, never its argv):
  `broker` (between brokers), `admin` (the `keystone` command, the tests and benchmarks),
  `control`, `router` (routers, backfills and redrives) and `proxy`, each password a file of
  `<state_dir>/conf/kafka/users` readable by its owner only.
- **ACLs** (the KRaft `StandardAuthorizer`; nothing is allowed that no ACL allows): `broker` and
  `admin` are super users; the others get what `SERVICE_USERS` grants them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AclOperation, AdminClient, ResourcePatternType, ResourceType

from keystone.contracts import kafka_clients
from keystone.contracts.errors import StackError
from keystone.contracts.kafka_acls import Grant, bindings, reconcile_acls
from keystone.contracts.names import SHADOW_TOPICS, TRANSACTIONAL_GROUPS, fronting_topic
from keystone.contracts.settings import Settings, stored_secret
from keystone.stack import tls

MECHANISM = "SCRAM-SHA-512"
PRINCIPALS = ("broker", "admin", "control", "router", "proxy")
BROKER_NAME = "keystone-broker"
BROKER_SUBJECT = f"CN={BROKER_NAME}"  # the brokers' certificate: their name on the controllers
SUPER_USERS = ("User:broker", "User:admin", f"User:{BROKER_SUBJECT}")
FRONTING_PREFIX = fronting_topic("xx")[: -len("xx")]  # every stream's fronting and dead letters

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
        "provisions topics, reads them (previews, dead letters, positions) and the groups' "
        "committed positions; deletes shadows' topics and groups once they end; issues apps' "
        "credentials and keeps their ACLs, which Kafka allows only to a user that may alter the "
        "cluster, so any ACL and any user's password: in effect a super user",
        (
            *((_TOPIC, "*", _ANY, op) for op in (_Op.CREATE, _Op.DESCRIBE, _Op.READ)),
            (_TOPIC, SHADOW_TOPICS, _PREFIX, _Op.DELETE),
            (_GROUP, TRANSACTIONAL_GROUPS, _PREFIX, _Op.DELETE),
            *((_GROUP, "*", _ANY, op) for op in (_Op.READ, _Op.DESCRIBE)),
            *((_CLUSTER, "kafka-cluster", _ANY, op) for op in (_Op.ALTER, _Op.DESCRIBE)),
        ),
    ),
)


def passwords(settings: Settings, *, create: bool) -> dict[str, str]:
    """Each user's password: made where missing when `create` (before the storage is
    formatted with them); afterwards a missing one is refused, since the storage keeps the users
    it was formatted with."""
    users = settings.kafka_password_file("admin").parent
    users.mkdir(parents=True, exist_ok=True)
    users.chmod(0o700)
    found = {}
    for principal in PRINCIPALS:
        path = settings.kafka_password_file(principal)
        password = stored_secret(path, create=create)
        if password is None:
            raise StackError(
                f"{path} is missing, but Kafka's storage was formatted with its user: restore "
                "it, or start afresh (`keystone stack down --purge`)"
            )
        found[principal] = password
    return found


def scram_users(settings: Settings) -> str:
    """The formatting tool's `--add-scram` values, a line each (for its standard input)."""
    return "".join(
        f"{MECHANISM}=[name={principal},password={password}]\n"
        for principal, password in passwords(settings, create=True).items()
    )


def make_certificates(settings: Settings) -> None:
    """The brokers' key store (their key, then their certificate, in one PEM file: Kafka's PEM
    key store) and the CA that signed it (`stack.tls`). The certificate serves clients and is
    the brokers' name on the controllers, so it is for both ends of a connection."""

    def keystore(work: Path, key: Path, certificate: Path) -> None:
        store = work / "broker-keystore.pem"
        store.touch(mode=0o600)
        store.write_text(key.read_text() + certificate.read_text())

    usage = "serverAuth,clientAuth"
    tls.issue(
        settings.kafka_tls_dir, settings, BROKER_NAME, usage, ("broker-keystore.pem",), keystore
    )


def broker_properties(
    settings: Settings, host: str, client: int, controller: int, *, formatted: bool
) -> dict:
    """The listeners' part of a secured broker's server.properties (`formatted`: its storage
    is, with its users)."""
    tls = settings.kafka_tls_dir
    login = kafka_clients.LOGIN_MODULES[MECHANISM]
    password = passwords(settings, create=not formatted)["broker"]
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
    """Makes each service user's ACLs what `SERVICE_USERS` grants (apps' users are control's:
    `control.kafka_access`)."""
    wanted = set().union(*(bindings(f"User:{u.name}", u.grants) for u in SERVICE_USERS))
    services = {f"User:{u.name}" for u in SERVICE_USERS}
    # Quiet: the cluster's other brokers may still be starting (refused connections), and
    # what fails is raised from the answers.
    admin = AdminClient(kafka_clients.librdkafka(settings) | {"log_level": 0})
    try:
        reconcile_acls(admin, wanted, lambda binding: binding.principal in services)
    except KafkaException as e:
        raise StackError(f"Kafka did not take the services' ACLs: {e}") from e

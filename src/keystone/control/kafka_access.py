"""Direct producers' own Kafka logins on a secured cluster (decision 0038).

An app may hold a SCRAM credential (`kafka_clients.app_user`): issued on request and shown
once, made anew when its key is rotated, deleted when it is revoked or the app is. Its ACLs let it
write exactly the fronting topics of the streams it is granted (`Write` on each, literally, and
`IdempotentWrite` on the cluster), and control keeps them so: at once when a grant, a credential
or an app changes, and every `fleet.ACCESS_SECONDS` by the fleet leader, which also deletes a
credential whose app no longer holds one (a deletion Kafka missed is made then). The user and
its ACLs are on every fronting cluster (`contracts.fronting`), so that the app writes wherever
its streams' writes go: a credential is issued only while every cluster answers. Every change
of apps' access takes one lock in Redis, so that a pass never acts on what it read before
another change: it cannot delete a credential issued meanwhile, nor bring back a revoked grant.

Control manages the Kafka users whose names start with `kafka_clients.APP_USER_PREFIX` and
their ACLs, and no others; only where `kafka_app_users` says so (the embedded secured Kafka by
default), since on another cluster such users could be someone else's.

Kafka cannot carry the writing principal on a record: what an app's credential proves is that a
record in a stream's fronting topic was written by one of the stream's granted apps (or by the
proxy, or a router's Keystone output), not that its `ks_app` header names the right one.
`DirectProducer` stamps its own user's app; a client built by hand can stamp any name.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import redis
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from keystone.contracts import fronting, kafka_clients
from keystone.contracts.errors import Conflict, KeystoneError, Unavailable
from keystone.contracts.kafka_acls import TIMEOUT, Grant, bindings, reconcile_acls
from keystone.contracts.names import fronting_topic, valid_name
from keystone.contracts.registry import key
from keystone.contracts.settings import Settings
from keystone.control.store import Store

log = logging.getLogger(__name__)
R = TypeVar("R")

SCRAM_ITERATIONS = 8192  # Kafka's own tools' default
APP_PRINCIPAL_PREFIX = f"User:{kafka_clients.APP_USER_PREFIX}"
LOCK = key("lock", "kafka-access")
LOCK_SECONDS = 120  # a holder that died frees it after this long
_REFUSALS = (KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.SASL_AUTHENTICATION_FAILED)


def app_grants(streams: Iterable[str]) -> set[Grant]:
    """What an app's user may do: write the fronting topics of `streams`, idempotently."""
    literal = ResourcePatternType.LITERAL
    return {
        (ResourceType.BROKER, "kafka-cluster", literal, AclOperation.IDEMPOTENT_WRITE),
        *((ResourceType.TOPIC, fronting_topic(s), literal, AclOperation.WRITE) for s in streams),
    }


def app_principal(app: str) -> str:
    return f"User:{kafka_clients.app_user(app)}"


class AppAccess:
    """Apps' Kafka credentials and ACLs, through control's own Kafka user (which Kafka lets
    change users and ACLs only with `Alter` on the cluster: control administers the cluster's
    users and ACLs, the proxy's and routers' users do not)."""

    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store
        self._admins: dict[str, AdminClient] = {}

    @property
    def enabled(self) -> bool:
        return self.settings.kafka_app_users and kafka_clients.scram(self.settings)

    def require(self) -> None:
        if not self.enabled:
            raise Conflict(
                "control issues no Kafka credentials here (kafka_app_users "
                f"{str(self.settings.kafka_app_users).lower()}, kafka_security_protocol "
                f"{kafka_clients.protocol(self.settings)}, mechanism "
                f"{self.settings.kafka_sasl_mechanism}; it needs SCRAM logins): a direct "
                "producer connects as the settings say"
            )

    @property
    def admins(self) -> list[AdminClient]:
        """A client of each fronting cluster: an app's user and ACLs are on every one, so that
        it writes wherever the stream's writes go."""
        return list(self._by_cluster().values())

    def _by_cluster(self) -> dict[str, AdminClient]:
        for cluster in fronting.clusters(self.settings):
            if cluster.name not in self._admins:  # kept: a TLS handshake and a login a use else
                connection = kafka_clients.librdkafka(cluster.connect(self.settings))
                self._admins[cluster.name] = AdminClient(connection | {"log_level": 0})
        return dict(self._admins)

    def issue(self, app: str, record: Callable[[], R]) -> tuple[str, R]:
        """A new password for the app's user (its old one, if any, stops working); once every
        fronting cluster has it, `record` writes the registry's side (that the app holds it,
        or its new key), and the ACLs are made current; all under the lock. The password is
        the caller's to show once: Kafka keeps its salted hash. Every cluster is asked first:
        one that does not answer refuses the change before any takes it (503); one that fails
        midway leaves the old password refused where the new one was taken, and the caller
        told to try again."""
        self.require()
        password = secrets.token_urlsafe(32)
        mechanism = ScramMechanism[self.settings.kafka_sasl_mechanism.replace("-", "_")]
        upsert = UserScramCredentialUpsertion(
            kafka_clients.app_user(app),
            ScramCredentialInfo(mechanism, SCRAM_ITERATIONS),
            password.encode(),
        )
        with self._lock():
            try:
                for admin in self.admins:
                    admin.list_topics(timeout=TIMEOUT)  # every cluster answers, before any changes
                for admin in self.admins:
                    for future in admin.alter_user_scram_credentials(
                        [upsert], request_timeout=TIMEOUT
                    ).values():
                        future.result()
                recorded = record()
                self._acls()
            except KafkaException as e:
                raise _refusal(e) from e
        return password, recorded

    def sync(self) -> None:
        """Every app's ACLs made what the registry says now, and credentials no app holds any
        more deleted. Never raises: what is not done now is done by the fleet leader's next
        pass (said in the log)."""
        if not self.enabled:
            return
        try:
            with self._lock():
                holders = {kafka_clients.app_user(a.name) for a in self.store.apps() if a.kafka}
                wanted, owned = self._wanted()
                # Each cluster on its own: one that is lost must not leave a revoked grant
                # standing on the one taking the writes.
                for name, admin in self._by_cluster().items():
                    try:
                        users = self._app_users(admin)
                        stale = {u: ms for u, ms in users.items() if u not in holders}
                        self._delete_users(admin, stale)
                        reconcile_acls(admin, wanted, owned)
                    except KafkaException as e:
                        log.warning("apps' Kafka access on %s not made current: %s", name, e)
        except KeystoneError as e:
            log.warning("apps' Kafka access not made current (done on a later pass): %s", e)

    @contextmanager
    def _lock(self) -> Iterator[None]:
        lock = self.store.redis.lock(LOCK, timeout=LOCK_SECONDS, blocking_timeout=60)
        try:
            acquired = lock.acquire()
        except redis.RedisError as e:
            raise Unavailable(f"the registry is unreachable: {e}", retry_after=5) from e
        if not acquired:
            raise Unavailable("apps' Kafka access is being changed: try again", retry_after=5)
        try:
            yield
        finally:
            try:
                lock.release()
            except redis.RedisError:  # expired meanwhile, or Redis away: it frees itself
                log.warning("the lock on apps' Kafka access was not released")

    def _acls(self) -> None:
        wanted, owned = self._wanted()
        for admin in self.admins:
            reconcile_acls(admin, wanted, owned)

    def _wanted(self) -> tuple[set[AclBinding], Callable[[AclBinding], bool]]:
        """The apps' ACLs the registry asks for, and which ACLs are the apps' to reconcile."""
        specs, unreadable = self.store.read_streams()
        # A stored spec that does not read back: its grants are unknown, so its current
        # holders' ACLs on it stay as they are (as its router does) until the admin replaces or
        # deletes it; those of apps that hold no credential go.
        kept = {fronting_topic(u.stream) for u in unreadable if valid_name(u.stream)}
        wanted: set[AclBinding] = set()
        holders = set()
        for app in self.store.apps():
            if app.kafka:
                holders.add(app_principal(app.name))
                granted = [s.name for s in specs if app.name in s.producers]
                wanted |= bindings(app_principal(app.name), app_grants(granted))

        def owned(binding: AclBinding) -> bool:
            if not binding.principal.startswith(APP_PRINCIPAL_PREFIX):
                return False
            return binding.name not in kept or binding.principal not in holders

        return wanted, owned

    @staticmethod
    def _app_users(admin: AdminClient) -> dict[str, list[ScramMechanism]]:
        """Each app's user the cluster knows, and the mechanisms it has a credential of."""
        future = admin.describe_user_scram_credentials(request_timeout=TIMEOUT)
        return {
            user: [info.mechanism for info in description.scram_credential_infos]
            for user, description in future.result().items()
            if user.startswith(kafka_clients.APP_USER_PREFIX)
        }

    @staticmethod
    def _delete_users(admin: AdminClient, users: dict[str, list[ScramMechanism]]) -> None:
        deletions = [UserScramCredentialDeletion(u, m) for u, ms in users.items() for m in ms]
        if not deletions:
            return
        for user, future in admin.alter_user_scram_credentials(
            deletions, request_timeout=TIMEOUT
        ).items():
            future.result()
            log.info("deleted the Kafka credential of %s", user)


def _refusal(e: KafkaException) -> KeystoneError:
    """What the caller is told: Kafka away is worth a retry; a refusal of control's own user
    is the platform's to fix, not the caller's to retry."""
    if e.args[0].code() in _REFUSALS:
        return KeystoneError(
            "Kafka refused control's user the change (it needs Alter on the cluster): "
            f"{e.args[0].str()}"
        )
    return Unavailable(f"Kafka did not take the credential: {e.args[0].str()}", retry_after=5)

"""Direct producers' own Kafka logins on a secured cluster (decision 0038).

An app may hold a SCRAM credential (`kafka_clients.app_user`): issued on request and shown
once, made anew when its key is rotated, deleted when it is revoked or the app is. Its ACLs let it
write exactly the fronting topics of the streams it is granted (`Write` on each, literally, and
`IdempotentWrite` on the cluster), and control keeps them so: at once when a grant, a credential
or an app changes, and every `fleet.ACCESS_SECONDS` by the fleet leader, which also
deletes a credential whose app no longer holds one (a deletion Kafka missed is made then).

Kafka cannot carry the writing principal on a record: what an app's credential proves is that a
record in a stream's fronting topic was written by one of the stream's granted apps (or by the
proxy, or a router's Keystone output), not that its `ks_app` header names the right one.
`DirectProducer` stamps its own user's app; a client built by hand can stamp any name.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterable

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from keystone.contracts import kafka_clients
from keystone.contracts.errors import Conflict, Unavailable
from keystone.contracts.names import fronting_topic
from keystone.contracts.settings import Settings
from keystone.control.store import Store

log = logging.getLogger(__name__)

SCRAM_ITERATIONS = 8192  # Kafka's own tools' default
TIMEOUT = 30.0

Grant = tuple[ResourceType, str, ResourcePatternType, AclOperation]
APP_PRINCIPAL_PREFIX = f"User:{kafka_clients.APP_USER_PREFIX}"


def app_grants(streams: Iterable[str]) -> set[Grant]:
    """What an app's user may do: write the fronting topics of `streams`, idempotently."""
    literal = ResourcePatternType.LITERAL
    return {
        (ResourceType.BROKER, "kafka-cluster", literal, AclOperation.IDEMPOTENT_WRITE),
        *((ResourceType.TOPIC, fronting_topic(s), literal, AclOperation.WRITE) for s in streams),
    }


def bindings(principal: str, grants: Iterable[Grant]) -> set[AclBinding]:
    allow = AclPermissionType.ALLOW
    return {AclBinding(k, name, p, principal, "*", op, allow) for k, name, p, op in grants}


def reconcile_acls(
    admin: AdminClient, wanted: set[AclBinding], owned: Callable[[AclBinding], bool]
) -> None:
    """Makes the ACLs that `owned` picks exactly `wanted`: the missing created, the others
    deleted (Kafka keeps an ACL made twice once). Raises `KafkaException`."""
    every = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    found = {b for b in admin.describe_acls(every, request_timeout=TIMEOUT).result() if owned(b)}
    if wanted - found:
        for future in admin.create_acls(list(wanted - found), request_timeout=TIMEOUT).values():
            future.result()
    if found - wanted:
        stale = [_filter(binding) for binding in found - wanted]
        for future in admin.delete_acls(stale, request_timeout=TIMEOUT).values():
            future.result()


def _filter(binding: AclBinding) -> AclBindingFilter:
    """The filter that matches `binding` alone (what `delete_acls` takes)."""
    b = binding
    fields = (b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation)
    return AclBindingFilter(*fields, b.permission_type)


class AppAccess:
    """Apps' Kafka credentials and ACLs, through control's own Kafka user (which Kafka lets
    change users and ACLs only with `Alter` on the cluster: control is the cluster's ACL
    administrator, the proxy's and routers' users are not)."""

    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store
        self._admin: AdminClient | None = None

    @property
    def enabled(self) -> bool:
        return kafka_clients.scram(self.settings)

    def require(self) -> None:
        if not self.enabled:
            raise Conflict(
                "Kafka here takes no SCRAM logins (kafka_security_protocol "
                f"{kafka_clients.protocol(self.settings)}, mechanism "
                f"{self.settings.kafka_sasl_mechanism}): there is no credential to issue; a "
                "direct producer connects as the settings say"
            )

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:  # one, kept: a TLS handshake and a login per use otherwise
            self._admin = AdminClient(kafka_clients.librdkafka(self.settings) | {"log_level": 0})
        return self._admin

    def issue(self, app: str) -> str:
        """A new password for the app's user (its old one, if any, stops working), and its
        ACLs made current. The password is the caller's to show once: Kafka keeps its salted
        hash only."""
        self.require()
        password = secrets.token_urlsafe(32)
        mechanism = ScramMechanism[self.settings.kafka_sasl_mechanism.replace("-", "_")]
        upsert = UserScramCredentialUpsertion(
            kafka_clients.app_user(app),
            ScramCredentialInfo(mechanism, SCRAM_ITERATIONS),
            password.encode(),
        )
        try:
            for future in self.admin.alter_user_scram_credentials(
                [upsert], request_timeout=TIMEOUT
            ).values():
                future.result()
            self._acls()
        except KafkaException as e:
            raise Unavailable(f"Kafka did not take the credential: {e}", retry_after=5) from e
        return password

    def sync(self) -> None:
        """Every app's ACLs made what the registry says now, and credentials no app holds any
        more deleted; what Kafka does not take now is retried by the fleet leader's next pass."""
        if not self.enabled:
            return
        try:
            users = self._app_users()  # first: a credential issued meanwhile is in the registry
            self._acls()
            holders = {kafka_clients.app_user(a.name) for a in self.store.apps() if a.kafka}
            self._delete_users({u: ms for u, ms in users.items() if u not in holders})
        except KafkaException as e:
            log.warning("apps' Kafka access not made current (retried): %s", e)

    def _acls(self) -> None:
        specs, unreadable = self.store.read_streams()
        # A stored spec that does not read back: its grants are unknown, its ACLs stay as
        # they are until the admin replaces or deletes it (as its router does).
        kept = {fronting_topic(u.stream) for u in unreadable}
        wanted: set[AclBinding] = set()
        for app in self.store.apps():
            if app.kafka:
                granted = [s.name for s in specs if app.name in s.producers]
                principal = f"User:{kafka_clients.app_user(app.name)}"
                wanted |= bindings(principal, app_grants(granted))

        def owned(binding: AclBinding) -> bool:
            return binding.principal.startswith(APP_PRINCIPAL_PREFIX) and binding.name not in kept

        reconcile_acls(self.admin, wanted, owned)

    def _app_users(self) -> dict[str, list[ScramMechanism]]:
        """Each app's user Kafka knows, and the mechanisms it has a credential of."""
        future = self.admin.describe_user_scram_credentials(request_timeout=TIMEOUT)
        described = future.result()
        return {
            user: [info.mechanism for info in description.scram_credential_infos]
            for user, description in described.items()
            if user.startswith(kafka_clients.APP_USER_PREFIX)
        }

    def _delete_users(self, users: dict[str, list[ScramMechanism]]) -> None:
        deletions = [UserScramCredentialDeletion(u, m) for u, ms in users.items() for m in ms]
        if not deletions:
            return
        for user, future in self.admin.alter_user_scram_credentials(
            deletions, request_timeout=TIMEOUT
        ).items():
            future.result()
            log.info("deleted the Kafka credential of %s", user)

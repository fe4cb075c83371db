"""How every Kafka client of the project connects: one function per client kind turns the
settings (`kafka_bootstrap`, `kafka_security_protocol`, `kafka_sasl_*`, `kafka_ssl_*`) into its
configuration, and no client builds its own.

- `librdkafka`: confluent-kafka's producers, consumers and admin clients (the proxy,
  `DirectProducer`, control, the audit, the benchmarks).
- `java`: kafka-clients in a JVM (the exactly-once writer, Flink's connector).
- `spark_options`: Spark's Kafka source and sink (`kafka.`-prefixed `java`).

Secrets (a SASL password, a key's password or the key itself) are in the configurations these
return, so they must reach a child process through the environment or a file, never its argv;
`SECRET_KEYS` names the keys that hold them, which Spark redacts from what it logs and shows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from keystone.contracts.settings import Settings, given_secret

# The configuration keys whose values are secrets, in both clients' names: a regular
# expression over keys, as Spark's `spark.sql.redaction.options.regex` takes them.
SECRET_KEYS = r"sasl\.jaas\.config|sasl\.password|ssl\.key\.password|ssl\.keystore\.key"

LOGIN_MODULES = {
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
}


def protocol(settings: Settings) -> str:
    return settings.kafka_security_protocol or "PLAINTEXT"


def uses_sasl(settings: Settings) -> bool:
    return protocol(settings).startswith("SASL_")


def uses_tls(settings: Settings) -> bool:
    return protocol(settings) in ("SSL", "SASL_SSL")


def sasl_password(settings: Settings) -> str:
    """The SASL password: the setting's, else the file's (read now: a rotated one is used by
    the next client made)."""
    return given_secret(settings.kafka_sasl_password, settings.kafka_sasl_password_file)


def librdkafka(settings: Settings) -> dict[str, Any]:
    """A confluent-kafka client's configuration of the connection (bootstrap servers and
    security); a client adds its own keys (`librdkafka(settings) | {"group.id": ...}`)."""
    found: dict[str, Any] = {
        "bootstrap.servers": settings.kafka_bootstrap,
        "security.protocol": protocol(settings),
    }
    if uses_sasl(settings):
        found |= {
            "sasl.mechanism": settings.kafka_sasl_mechanism,
            "sasl.username": settings.kafka_sasl_username,
            "sasl.password": sasl_password(settings),
        }
    if uses_tls(settings):
        optional = {
            "ssl.ca.location": settings.kafka_ssl_ca_file,
            "ssl.certificate.location": settings.kafka_ssl_certificate_file,
            "ssl.key.location": settings.kafka_ssl_key_file,
            "ssl.key.password": settings.kafka_ssl_key_password.get_secret_value(),
        }
        found |= {k: v for k, v in optional.items() if v}
    return found


def java(settings: Settings) -> dict[str, str]:
    """kafka-clients' configuration of the connection (bootstrap servers and security)."""
    found = {"bootstrap.servers": settings.kafka_bootstrap, "security.protocol": protocol(settings)}
    if uses_sasl(settings):
        mechanism = settings.kafka_sasl_mechanism
        found["sasl.mechanism"] = mechanism
        found["sasl.jaas.config"] = (
            f"{LOGIN_MODULES[mechanism]} required "
            f"username={_quoted(settings.kafka_sasl_username)} "
            f"password={_quoted(sasl_password(settings))};"
        )
    if uses_tls(settings):
        if settings.kafka_ssl_ca_file:
            found["ssl.truststore.type"] = "PEM"
            found["ssl.truststore.location"] = settings.kafka_ssl_ca_file
        if settings.kafka_ssl_certificate_file and settings.kafka_ssl_key_file:
            # kafka-clients reads a PEM key store from one file or from values: given apart,
            # they are passed as values.
            found["ssl.keystore.type"] = "PEM"
            found["ssl.keystore.certificate.chain"] = Path(
                settings.kafka_ssl_certificate_file
            ).read_text()
            found["ssl.keystore.key"] = Path(settings.kafka_ssl_key_file).read_text()
            key_password = settings.kafka_ssl_key_password.get_secret_value()
            if key_password:
                found["ssl.key.password"] = key_password
    return found


def spark_options(settings: Settings) -> dict[str, str]:
    """Spark's Kafka source and sink options for the connection (`kafka.` + `java`)."""
    return {f"kafka.{k}": v for k, v in java(settings).items()}


def _quoted(value: str) -> str:
    """A JAAS option value: double-quoted, its quotes and backslashes escaped."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


# A direct producer's own Kafka user (issued by control, `control.kafka_access`): the app's
# name after a prefix no service user has, so no app can be given a service's name.
APP_USER_PREFIX = "keystone-app-"


def app_user(app: str) -> str:
    return f"{APP_USER_PREFIX}{app}"


def scram(settings: Settings) -> bool:
    """Kafka here takes SCRAM logins, the kind control can issue to apps (a PLAIN user is the
    brokers' configuration's, not something a client can make)."""
    return uses_sasl(settings) and settings.kafka_sasl_mechanism.startswith("SCRAM-")

"""The one settings model: `KEYSTONE_*` environment variables, a `.env` file, or defaults.

Every address is configurable and defaults to the embedded stack on loopback. A service whose
address is set explicitly (say `KEYSTONE_KAFKA_BOOTSTRAP=broker-1:9092`) is external: the stack
neither starts nor stops it, it only checks its health.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from keystone.contracts.limits import Limits

MAX_EVENT_BYTES = Limits.model_fields["max_event_bytes"].default
# Room beside an event's bytes in its Kafka record: key, headers (a dead letter's reason too) and
# the record's own framing.
RECORD_HEADROOM = 64 * 1024

_EXTERNAL = " Set explicitly, the service is external: the stack only checks its health."

# Which address setting makes each service external when it is set explicitly.
ADDRESS_SETTING: dict[str, str] = {
    "postgres": "metastore_uri",  # the database exists only to back the embedded metastore
    "metastore": "metastore_uri",
    "kafka": "kafka_bootstrap",
    "redis": "redis_url",
    "elasticsearch": "elasticsearch_url",
    "prometheus": "prometheus_url",
    "alertmanager": "alertmanager_url",
    "ingest_proxy": "proxy_url",
    "control": "control_url",
}


def _as_env(value: object) -> str:
    """A setting's value as its variable gives it (the fronting lists as they are read)."""
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, list):
        return ",".join(map(str, value))
    if isinstance(value, dict):
        return ";".join(f"{k}={v}" for k, v in value.items())
    return str(value)


DEFAULT_CLUSTER = "main"  # the one fronting cluster's name, unless settings name them
# A fronting cluster's name: it names the embedded cluster's service, folders and metrics.
FRONTING_NAME = re.compile(r"[a-z][a-z0-9]{0,15}")


def user_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def given_secret(inline: SecretStr, file: str) -> str:
    """A password given in the settings, else read from its file now (a rotated one is used by
    the next client made); "" when neither is given. Raises `OSError` for an unreadable file."""
    value = inline.get_secret_value()
    if value or not file:
        return value
    return Path(file).read_text().strip()


def stored_secret(path: Path, create: bool, prefix: str = "") -> str | None:
    """A secret kept in a file readable by its owner only: read, or made there when `create`
    (256 random bits). None when there is none to read."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        if not create:
            return None
    except PermissionError:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    secret = f"{prefix}{secrets.token_urlsafe(32)}"
    # Written whole beside it, then linked into place: a reader never sees it half written, and
    # of two processes making it at once, the first link wins and both use its secret.
    staging = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secret)
    try:
        os.link(staging, path)
    except FileExistsError:
        return path.read_text().strip()
    except OSError:  # a file system without hard links (some shared mounts): create it alone
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return path.read_text().strip()
        with os.fdopen(fd, "w") as out:
            out.write(secret)
            out.flush()
            os.fsync(out.fileno())
    finally:
        staging.unlink()
    return secret


class Settings(BaseSettings, Limits):
    """Every setting; the limits each tenant is held to are inherited from `Limits`."""

    model_config = SettingsConfigDict(env_prefix="KEYSTONE_", env_file=".env", extra="ignore")

    state_dir: Path = Field(
        default_factory=lambda: Path.cwd() / ".keystone",
        description="Everything the embedded stack writes: data, logs, pid files, checkpoints. "
        "Default: `.keystone` in the working directory.",
    )
    cache_dir: Path = Field(
        default_factory=lambda: user_cache() / "keystone",
        description="Downloaded jars, compiled Java classes and the Spark drivers' class "
        "archive; shared by every state directory. Default: `keystone` in the user's cache "
        "directory ($XDG_CACHE_HOME, else ~/.cache).",
    )
    class_archive_unused_days: int = Field(
        14,
        ge=1,
        description="A Spark drivers' class archive (about 190 MB each: one per Spark, Java "
        "and virtualenv) that no driver has opened for this many days is removed when another "
        "is built.",
    )
    bind_host: str = Field("127.0.0.1", description="Address every embedded server listens on.")

    # Ports of the embedded services. Not the products' usual ports, so a system Redis,
    # PostgreSQL or Prometheus that a package manager started cannot collide with the stack.
    kafka_port: int = Field(
        19092,
        description="The embedded Kafka's first broker's client port; broker n listens on this "
        "port + 2(n - 1).",
    )
    kafka_controller_port: int = Field(
        19093,
        description="The embedded Kafka's first KRaft controller port; broker n's controller "
        "listens on this port + 2(n - 1).",
    )
    kafka_security: Literal["plaintext", "sasl_ssl"] = Field(
        "plaintext",
        description="The embedded Kafka's client listeners. sasl_ssl: TLS with a certificate of "
        "a CA made in <state_dir>/conf/kafka/tls, SCRAM-SHA-512 users (the broker, the admin, "
        "control, the routers, the proxy; passwords in <state_dir>/conf/kafka/users) and ACLs: "
        "no client reaches it in plaintext or unauthenticated.",
    )
    kafka_brokers: int = Field(
        1,
        ge=1,
        le=9,
        description="Brokers of the embedded Kafka, each a broker and a KRaft controller in one "
        "process. 3: every topic the project creates has three replicas and needs two in sync, "
        "and the cluster survives one broker's death.",
    )
    fronting_clusters: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: [DEFAULT_CLUSTER],
        description="The fronting Kafka clusters producers write to, by name, comma-separated "
        "(`east,west`). Every stream's fronting and dead-letter topics are on each; producers "
        "write to the active one (the registry's, `keystone fronting`); routers read them all. "
        "The first is home: it is active unless control switched, and, unless "
        "fronting_bootstrap names its brokers, it is kafka_bootstrap's cluster, where the Kafka "
        "outputs' topics are. The embedded stack runs each; cluster n (from 0) listens on "
        "kafka_port + 100n.",
    )
    fronting_bootstrap: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        description="The brokers of the fronting clusters not embedded, as "
        "`name=host:port,host:port;name=...`: required for each but the first of an external "
        "Kafka's (the first's default is kafka_bootstrap).",
    )
    fronting_probe_seconds: float = Field(
        1.0,
        gt=0,
        le=30,
        description="How long control's fleet leader waits for a fronting cluster to answer a "
        "probe (a metadata request, one a second), before it counts as lost for that second.",
    )
    fronting_failover_after_seconds: float = Field(
        3.0,
        ge=0,
        description="How long the cluster taking writes must have been lost (not answering, or "
        "a fronting topic's partition without a leader) before the fleet leader moves its "
        "writes to the first other cluster that answers.",
    )
    fronting_switch_hold_seconds: float = Field(
        60.0,
        ge=0,
        description="No automatic switch within this long of the last switch, whoever made "
        "it: a flapping cluster does not make writes ping-pong.",
    )
    fronting_auto_failback: bool = Field(
        False,
        description="Whether the fleet leader moves writes back to home by itself once home "
        "has answered for fronting_failback_after_seconds (else an admin fails back: "
        "`keystone fronting failback`).",
    )
    fronting_failback_after_seconds: float = Field(
        120.0, ge=0, description="How long home must answer before an automatic failback."
    )
    redis_port: int = Field(16379, description="The embedded Redis (the registry) port.")
    elasticsearch_port: int = Field(19200, description="The embedded Elasticsearch's HTTP port.")
    elasticsearch_transport_port: int = Field(
        19300, description="The embedded Elasticsearch's transport port."
    )
    postgres_port: int = Field(
        15432, description="The embedded PostgreSQL (the metastore's database) port."
    )
    metastore_port: int = Field(19083, description="The embedded Hive metastore's Thrift port.")
    prometheus_port: int = Field(19090, description="The embedded Prometheus's port.")
    alertmanager_port: int = Field(
        19390,
        description="The embedded Alertmanager's HTTP port; peer n listens on this port + 2(n - 1)"
        ", and gossips with the other peers on the port above its own.",
    )
    alertmanager_replicas: int = Field(
        1,
        ge=1,
        le=3,
        description="Alertmanager peers of the embedded stack, clustered: they share silences "
        "and notification logs, so that a notification goes out once; Prometheus sends every "
        "alert to each.",
    )

    # Where clients find the services; derived from the ports above unless set.
    kafka_bootstrap: str = Field(
        "",
        description=f"Kafka bootstrap servers (default: the embedded broker).{_EXTERNAL}",
    )
    redis_url: str = Field(
        "",
        description=f"The registry's Redis URL (default: the embedded Redis).{_EXTERNAL}",
    )
    # How every Kafka client of the project connects (`contracts.kafka_clients` turns these
    # into each client kind's configuration; nothing else builds one).
    kafka_security_protocol: Literal["", "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "",
        description="How Kafka's clients connect: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL "
        "(default: PLAINTEXT).",
    )
    kafka_sasl_mechanism: Literal["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"] = Field(
        "SCRAM-SHA-512", description="The SASL mechanism, with a SASL protocol."
    )
    kafka_sasl_username: str = Field("", description="The SASL user, with a SASL protocol.")
    kafka_sasl_password: SecretStr = Field(
        SecretStr(""),
        description="The SASL user's password; or give kafka_sasl_password_file.",
    )
    kafka_sasl_password_file: str = Field(
        "", description="A file holding the SASL user's password (read when a client is made)."
    )
    kafka_ssl_ca_file: str = Field(
        "",
        description="PEM certificates of the authorities the brokers' certificates are checked "
        "against, with SSL or SASL_SSL (default: the system's).",
    )
    kafka_ssl_certificate_file: str = Field(
        "", description="The client's own PEM certificate, where the brokers ask for one."
    )
    kafka_ssl_key_file: str = Field("", description="The PEM private key of that certificate.")
    kafka_ssl_key_password: SecretStr = Field(
        SecretStr(""), description="The password of that key, if it has one."
    )
    kafka_app_users: bool = Field(
        False,
        description="Control issues apps their own Kafka users (SCRAM, named keystone-app-<app>) "
        "with ACLs on their granted streams' fronting topics, and manages every Kafka user "
        "of that prefix and its ACLs: needs SCRAM logins and a control user that may alter the "
        "cluster. Default: on for the embedded secured Kafka, off for any other.",
    )
    elasticsearch_url: str = Field(
        "", description=f"Elasticsearch's URL (default: the embedded node).{_EXTERNAL}"
    )
    # How every Elasticsearch client connects (`contracts.elasticsearch` turns these into one).
    elasticsearch_username: str = Field(
        "", description="A user for Elasticsearch's basic authentication, where it asks for one."
    )
    elasticsearch_password: SecretStr = Field(
        SecretStr(""), description="That user's password; or give elasticsearch_password_file."
    )
    elasticsearch_password_file: str = Field(
        "", description="A file holding that user's password, read when a client is made."
    )
    elasticsearch_ca_file: str = Field(
        "",
        description="The PEM CA that signed Elasticsearch's certificate, for an https URL "
        "(default: the system's authorities).",
    )
    metastore_uri: str = Field(
        "",
        description=f"The Hive metastore's URI (default: the embedded one).{_EXTERNAL}",
    )
    metastore_security: Literal["plaintext", "tls"] = Field(
        "plaintext",
        description="The embedded metastore's Thrift listener. tls: a certificate of a CA made "
        "in <state_dir>/conf/metastore/tls, which clients trust; no client reaches it in "
        "plaintext.",
    )
    metastore_ssl_ca_file: str = Field(
        "",
        description="The PEM CA that signed the metastore's certificate: set, every client "
        "reaches the metastore over TLS (Spark's Hive client by `hive.metastore.use.SSL`). "
        "Default: the embedded one's, when it runs with tls.",
    )
    prometheus_url: str = Field(
        "", description=f"Prometheus's URL (default: the embedded Prometheus).{_EXTERNAL}"
    )
    alertmanager_url: str = Field(
        "",
        description="Alertmanager's URL (default: the embedded one's first peer); Prometheus "
        f"sends alerts there and control loads its configuration there.{_EXTERNAL}",
    )
    alertmanager_username: str = Field(
        "keystone", description="The login control and Prometheus give Alertmanager."
    )
    alertmanager_password: SecretStr = Field(
        SecretStr(""),
        description="Its password; default: generated once into <state_dir>/conf/alertmanager/"
        "password (readable by its owner only), which the embedded peers require: their API "
        "would otherwise let anyone on the machine read every receiver or silence every alert.",
    )
    proxy_url: str = Field(
        "",
        description=f"The ingest proxy's URL (default: the embedded proxy).{_EXTERNAL}",
    )
    control_url: str = Field(
        "",
        description=f"Control's URL, for the CLI and links (default: the embedded one).{_EXTERNAL}",
    )
    warehouse_dir: str = Field("", description="Hive warehouse; default <state_dir>/warehouse.")

    spark_master: str = Field(
        "",
        description="Any spark://, k8s:// or yarn master; default: local, or the embedded "
        "standalone cluster's master (spark_cluster).",
    )
    spark_cluster: Literal["local", "standalone"] = Field(
        "local",
        description="standalone: the embedded stack runs a Spark standalone master and "
        "spark_workers workers (from the pyspark distribution), and every router, backfill and "
        "redrive is an application of that cluster, its driver beside control.",
    )
    spark_workers: int = Field(2, ge=1, le=8, description="Workers of the standalone cluster.")
    spark_worker_cores: int = Field(
        8,
        ge=1,
        description="Task slots each standalone worker offers (more than the machine's cores: a "
        "Real-time Mode task waits on Kafka most of the time, and holds its slot throughout).",
    )
    spark_worker_memory: str = Field(
        "4g", description="Memory each standalone worker offers its executors."
    )
    spark_executor_memory: str = Field(
        "512m", description="Heap of each executor of a router on the standalone cluster."
    )
    spark_master_port: int = Field(17077, description="The standalone master's port.")
    spark_master_ui_port: int = Field(
        18070, description="The standalone master's web UI (its /json/ is the cluster's state)."
    )
    spark_worker_port: int = Field(17078, description="Standalone worker n's port: this + n - 1.")
    spark_worker_ui_port: int = Field(
        18071, description="Standalone worker n's web UI port: this + n - 1."
    )
    spark_driver_java_options: str = Field(
        "",
        description="More JVM options for every Spark driver the project starts (routers, "
        "backfills, redrives, readers). The test suite's stack gives -XX:TieredStopAtLevel=1 "
        "-XX:+UseSerialGC: its many short-lived applications then start on 40% less CPU, and 8% "
        "less again (the fully optimizing compiler and G1 are what a long-lived router under "
        "load wants).",
    )
    kafka_replication: int = Field(
        0,
        ge=0,
        description="Replication factor of the topics created; 0: that of the embedded Kafka's "
        "brokers, at most 3.",
    )
    kafka_transaction_timeout_ms: int = Field(
        60_000,
        ge=1_000,
        le=900_000,  # the broker's default transaction.max.timeout.ms
        description="How long an exactly-once output's open transaction may last before the "
        "broker aborts it: readers of its topic wait at most this long behind the transaction "
        "of a router killed mid-batch (a restarted router aborts it at once). It must exceed "
        "the longest write of one batch's input partition, or that batch aborts every time.",
    )
    fault_switches: bool = Field(
        False,
        description="Tests only: an exactly-once output's writer fails a commit once where a "
        "file in <state_dir>/faults asks it to (router/java/TransactionalKafkaWriter.java).",
    )

    # The ingest proxy.
    proxy_port: int = Field(18080, description="The ingest proxy's HTTP port.")
    proxy_workers: int = Field(2, ge=1, description="Server processes behind the one port.")
    # Each server and its producer's threads then wake each other on one CPU, not across two:
    # at 500 requests/s of 100 events here, p99 19 and 25 ms pinned, 36 and 197 ms not.
    proxy_pin_cpus: bool = Field(
        True,
        description="Keep server i and its threads on the i-th CPU the proxy may use; turn off "
        "where the proxy's CPUs are busy with other work.",
    )
    # 5, not 2: half the broker's produce requests and their wake-ups; at half the peak rate
    # this kept p99 under 50 ms in 5 runs of 5 (2 ms: 1 of 5), for 2 ms more at the median.
    kafka_linger_ms: int = Field(
        5,
        ge=0,
        le=900_000,  # librdkafka's own range
        description="How long the proxy's producer waits to fill a batch: latency vs. load.",
    )
    # The router's Kafka sinks (Spark's, kafka-clients 3.9: 0 by default, 5 from Kafka 4.0):
    # at 0, a router at 5,000 events/s sent a request per handful of records and its producer
    # thread spent twice the CPU (docs/decisions/0034).
    router_kafka_linger_ms: int = Field(
        5,
        ge=0,
        le=900_000,
        description="How long a router's Kafka sinks (outputs, dead letters) wait to fill a "
        "batch: latency vs. CPU.",
    )
    kafka_queue_max_messages: int = Field(
        100_000, ge=1, description="Events a proxy process holds for Kafka before it answers 503."
    )
    # Above 0: librdkafka reads a message timeout of 0 as "never", and requests would hang.
    kafka_ack_timeout_seconds: float = Field(
        10.0, gt=0, description="How long the proxy waits for Kafka to acknowledge an event."
    )
    registry_refresh_seconds: float = Field(
        1.0, description="How often the proxy checks Redis for changed streams and apps."
    )

    # The control service.
    control_port: int = Field(
        18081,
        description="The control service's HTTP port (API, web UI, /metrics); replica n of the "
        "embedded one listens on this port + n - 1.",
    )
    control_replicas: int = Field(
        1,
        ge=1,
        le=4,
        description="Control processes of the embedded stack, each on its own port. Any of them "
        "serves the API; one at a time runs the fleet (a lease in Redis), and another takes it "
        "over within the lease's time when it dies.",
    )
    admin_token: SecretStr = Field(
        SecretStr(""),
        description="The admin's bearer token; default: generated once into "
        "<state_dir>/conf/control/admin-token (readable by its owner only).",
    )
    token: SecretStr = Field(
        SecretStr(""),
        description="The token the `keystone` command sends to control; default: the admin "
        "token from the state directory, when it can be read.",
    )
    redis_password: SecretStr = Field(
        SecretStr(""),
        description="Redis's password; default: generated once into "
        "<state_dir>/conf/redis/password, which the embedded Redis requires.",
    )
    scrape_interval_seconds: int = Field(
        5, description="How often Prometheus scrapes the proxy, control and the routers."
    )
    router_stop_timeout_seconds: float = Field(
        60.0, description="How long a router has to stop gracefully before it is killed."
    )

    # Alerts: how Alertmanager groups them, and where owners' receivers may send them.
    alert_group_wait_seconds: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="How long Alertmanager gathers a new group's alerts (one alert of one "
        "stream) before its first notification.",
    )
    alert_group_interval_seconds: float = Field(
        300.0,
        gt=0,
        description="How long it waits before notifying a group again of alerts added to it, "
        "or resolved.",
    )
    alert_repeat_interval_seconds: float = Field(
        14_400.0, gt=0, description="How often a group still firing is notified again."
    )
    alert_redeploy_settle_seconds: float = Field(
        300.0,
        ge=0,
        description="How long a redeployed (or resized) router runs before its stream's lag "
        "and delivery-rate alerts are heard again: control silences them from the stop on, "
        "while its queries start and catch up.",
    )
    alert_receiver_schemes: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["https"],
        description="The schemes an owner's webhook receiver may use (http, https), "
        "comma-separated.",
    )
    alert_receiver_networks: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Networks (CIDR, comma-separated: '10.1.0.0/16,127.0.0.1/32') an owner's "
        "webhook receiver may reach although they are loopback, link-local, private or "
        "otherwise not global, which are refused unless listed here.",
    )
    alert_receiver_ports: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["443"],
        description="The ports an owner's webhook receiver may reach: numbers and ranges, "
        "comma-separated ('443,8443,9000-9100'). A URL without a port is its scheme's.",
    )
    alert_receiver_proxy: str = Field(
        "",
        description="An HTTP proxy every receiver's request goes through (Alertmanager's "
        "proxy_url). Checked at registration, a webhook's host may resolve elsewhere by the "
        "time Alertmanager sends: a proxy that enforces the same networks as it connects "
        "closes that gap.",
    )
    alert_admin_webhook: SecretStr = Field(
        SecretStr(""),
        description="The admin's catch-all receiver, a webhook URL: every alert, whoever owns "
        "it, goes there too (none: alerts no owner hears are only shown). Not checked against "
        "the receivers' networks: the admin sets it.",
    )
    smtp_smarthost: str = Field(
        "",
        description="host:port of the SMTP server that e-mail receivers send through; while "
        "unset, an e-mail receiver is refused.",
    )
    smtp_from: str = Field("", description="The From address of alert e-mails.")
    smtp_username: str = Field("", description="The SMTP login, if the server asks for one.")
    smtp_password: SecretStr = Field(SecretStr(""), description="The SMTP password.")
    smtp_require_tls: bool = Field(True, description="Send e-mail only over STARTTLS.")

    kafka_heap: str = Field("1g", description="JVM heap of the embedded Kafka broker.")
    elasticsearch_heap: str = Field("1g", description="JVM heap of the embedded Elasticsearch.")
    metastore_heap: str = Field("512m", description="JVM heap of the embedded Hive metastore.")

    @field_validator("alert_receiver_schemes")
    @classmethod
    def _schemes(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - {"http", "https"})
        if unknown:
            raise ValueError(f"a webhook's scheme is http or https, not {unknown[0]!r}")
        return value

    @field_validator("alert_receiver_ports")
    @classmethod
    def _ports(cls, value: list[str]) -> list[str]:
        for ports in value:
            low, _, high = ports.partition("-")
            if not (low.isdigit() and (not high or high.isdigit())):
                raise ValueError(f"{ports!r} is not a port or a range of them ('9000-9100')")
            if not 0 < int(low) <= int(high or low) <= 65535:
                raise ValueError(f"{ports!r} is not within 1-65535, low to high")
        return value

    @field_validator("alert_receiver_networks")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for network in value:
            try:
                ipaddress.ip_network(network)
            except ValueError as e:
                raise ValueError(f"{network!r} is not a network in CIDR notation: {e}") from e
        return value

    @field_validator(
        "fronting_clusters",
        "alert_receiver_schemes",
        "alert_receiver_networks",
        "alert_receiver_ports",
        mode="before",
    )
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        return (
            [n.strip() for n in value.split(",") if n.strip()] if isinstance(value, str) else value
        )

    @field_validator("fronting_bootstrap", mode="before")
    @classmethod
    def _cluster_brokers(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        found = {}
        for part in filter(None, (p.strip() for p in value.split(";"))):
            name, equals, brokers = part.partition("=")
            if not equals or not name.strip() or not brokers.strip():
                raise ValueError(f"{part!r} is not name=host:port[,host:port]")
            found[name.strip()] = brokers.strip()
        return found

    @model_validator(mode="after")
    def _derive_addresses(self) -> Settings:
        host = self.bind_host
        self.state_dir = self.state_dir.resolve()
        self.cache_dir = self.cache_dir.resolve()
        # Derived values are assigned without touching model_fields_set: is_embedded() reads it.
        defaults = {
            "kafka_bootstrap": ",".join(
                f"{host}:{self.kafka_broker_ports(n)[0]}" for n in range(1, self.kafka_brokers + 1)
            ),
            "kafka_replication": min(3, self.kafka_brokers),
            "redis_url": f"redis://{host}:{self.redis_port}/0",
            "elasticsearch_url": f"http://{host}:{self.elasticsearch_port}",
            "metastore_uri": f"thrift://{host}:{self.metastore_port}",
            "prometheus_url": f"http://{host}:{self.prometheus_port}",
            "alertmanager_url": f"http://{host}:{self.alertmanager_port}",
            "proxy_url": f"http://{host}:{self.proxy_port}",
            "control_url": f"http://{host}:{self.control_port}",
            "spark_master": (
                f"spark://{host}:{self.spark_master_port}"
                if self.spark_cluster == "standalone"
                else "local[*]"
            ),
            "warehouse_dir": (self.state_dir / "warehouse").as_uri(),
        }
        if self.kafka_embedded_secured:
            # The stack's own CA, and the admin unless a process is given its principal
            # (`kafka_principal_env`).
            user = self.kafka_sasl_username or "admin"
            defaults |= {
                "kafka_security_protocol": "SASL_SSL",
                "kafka_ssl_ca_file": str(self.kafka_tls_dir / "ca.pem"),
                "kafka_sasl_username": user,
            }
            if not self.kafka_sasl_password.get_secret_value():  # the user's own, from its file
                defaults["kafka_sasl_password_file"] = str(self.kafka_password_file(user))
        if self.metastore_embedded_tls:
            defaults["metastore_ssl_ca_file"] = str(self.metastore_tls_dir / "ca.pem")
        if self.kafka_embedded_secured and "kafka_app_users" not in self.model_fields_set:
            object.__setattr__(self, "kafka_app_users", True)
        for name, value in defaults.items():
            if not getattr(self, name):
                object.__setattr__(self, name, value)
        self._check_fronting()
        if self.elasticsearch_username and urlsplit(self.elasticsearch_url).scheme == "http":
            raise ValueError(
                "elasticsearch_username is set, but elasticsearch_url is http: the password "
                "would cross the network in the clear; give an https URL"
            )
        return self

    def _check_fronting(self) -> None:
        names = self.fronting_clusters
        bad = [n for n in names if not FRONTING_NAME.fullmatch(n)]
        if not names or bad or len(set(names)) != len(names):
            raise ValueError(
                f"fronting_clusters must be distinct names matching {FRONTING_NAME.pattern}, "
                f"at least one: got {names}"
            )
        unknown = sorted(set(self.fronting_bootstrap) - set(names))
        if unknown:
            raise ValueError(
                f"fronting_bootstrap names clusters fronting_clusters does not: {unknown}"
            )
        others = [n for n in names[1:] if n not in self.fronting_bootstrap]
        if self.is_embedded("kafka") and set(self.fronting_bootstrap) - {names[0]}:
            raise ValueError(
                "with the embedded Kafka every fronting cluster is embedded: fronting_bootstrap "
                "may name only the first, or set kafka_bootstrap for an external Kafka"
            )
        if not self.is_embedded("kafka") and others:
            raise ValueError(f"fronting_bootstrap must give the brokers of {others}")
        home = self.fronting_bootstrap.get(names[0])
        if home is not None and home != self.kafka_bootstrap:
            # Outputs, dead letters, rewinds and backfills reach home's topics through it.
            raise ValueError(
                f"the home fronting cluster ({names[0]}) is kafka_bootstrap's: leave it out of "
                "fronting_bootstrap, or give it kafka_bootstrap's brokers"
            )

        def addresses(given: str) -> set[str]:
            return {b.strip() for b in given.split(",") if b.strip()}

        brokers = [addresses(self.kafka_bootstrap)] + [
            addresses(self.fronting_bootstrap[n]) for n in names[1:] if n in self.fronting_bootstrap
        ]
        shared = {
            b for i, a in enumerate(brokers) for b in a if any(b in o for o in brokers[i + 1 :])
        }
        if shared:
            raise ValueError(
                f"fronting clusters must not share brokers ({', '.join(sorted(shared))}): one "
                "cluster's topics would be read twice, as two"
            )

    def to_env(self) -> dict[str, str]:
        """KEYSTONE_* variables that give a child process these same settings."""
        names = self.model_fields_set | {"state_dir", "cache_dir"}
        env = {}
        for name in sorted(names):
            env[f"KEYSTONE_{name.upper()}"] = _as_env(getattr(self, name))
        return env

    def kafka_principal_env(self, principal: str) -> dict[str, str]:
        """KEYSTONE_* variables that make a child process of the embedded secured Kafka's stack
        connect as `principal`, with its password file (a password this process was given is
        not passed on); none when Kafka is not the embedded secured one: a child then connects
        as this process does."""
        if not self.kafka_embedded_secured:
            return {}
        return {
            "KEYSTONE_KAFKA_SASL_USERNAME": principal,
            "KEYSTONE_KAFKA_SASL_PASSWORD": "",
            "KEYSTONE_KAFKA_SASL_PASSWORD_FILE": str(self.kafka_password_file(principal)),
        }

    @property
    def kafka_embedded_secured(self) -> bool:
        """The stack runs Kafka itself, secured (`kafka_security` sasl_ssl)."""
        return self.is_embedded("kafka") and self.kafka_security == "sasl_ssl"

    @property
    def metastore_embedded_tls(self) -> bool:
        """The stack runs the metastore itself, over TLS (`metastore_security` tls)."""
        return self.is_embedded("metastore") and self.metastore_security == "tls"

    @property
    def metastore_tls_dir(self) -> Path:
        """The embedded metastore's CA, certificate and key store."""
        return self.conf_dir / "metastore" / "tls"

    @property
    def kafka_tls_dir(self) -> Path:
        """The embedded secured Kafka's CA and broker certificates."""
        return self.conf_dir / "kafka" / "tls"

    def kafka_password_file(self, principal: str) -> Path:
        """The embedded secured Kafka's SCRAM password of `principal`."""
        return self.conf_dir / "kafka" / "users" / principal

    def is_embedded(self, service: str) -> bool:
        """True when the stack runs this service itself (its address was not set)."""
        return ADDRESS_SETTING[service] not in self.model_fields_set

    def redis_auth(self) -> str | None:
        """The password every client gives Redis: the setting's, else, for the embedded Redis,
        the state directory's (None when there is none, or it cannot be read). An external
        Redis's password is the setting's, or in its URL."""
        configured = self.redis_password.get_secret_value()
        if configured or not self.is_embedded("redis"):
            return configured or None
        return stored_secret(self.redis_password_file, create=False)

    def redis_client_kwargs(self) -> dict[str, Any]:
        """What `redis.Redis.from_url(settings.redis_url, **kwargs)` needs besides the URL."""
        return {"password": self.redis_auth()}

    def alertmanager_auth(self, create: bool = False) -> tuple[str, str] | None:
        """The login every client gives Alertmanager: the setting's, else, for the embedded
        one, the state directory's (made there when `create`: the stack's); None: there is
        none to give."""
        configured = self.alertmanager_password.get_secret_value()
        if not configured and self.is_embedded("alertmanager"):
            configured = stored_secret(self.alertmanager_password_file, create=create) or ""
        return (self.alertmanager_username, configured) if configured else None

    @property
    def alertmanager_password_file(self) -> Path:
        return self.conf_dir / "alertmanager" / "password"

    @property
    def redis_password_file(self) -> Path:
        return self.conf_dir / "redis" / "password"

    @property
    def control_urls(self) -> list[str]:
        """Every control process's URL, the first first: the embedded replicas', or the one
        set (a load balancer's, say)."""
        if not self.is_embedded("control"):
            return [self.control_url]
        host = self.bind_host
        return [f"http://{host}:{self.control_port + n}" for n in range(self.control_replicas)]

    def kafka_broker_ports(self, node: int) -> tuple[int, int]:
        """The embedded broker `node`'s (1 to kafka_brokers) client and controller ports."""
        step = 2 * (node - 1)
        return self.kafka_port + step, self.kafka_controller_port + step

    @property
    def kafka_min_insync_replicas(self) -> int:
        """Replicas that must have a record before Kafka acknowledges it (acks=all): two of
        three, so an acknowledged event is on two disks and one broker may die."""
        return 2 if self.kafka_replication >= 3 else 1

    @property
    def max_record_bytes(self) -> int:
        """The largest Kafka record the project writes: an event at the limit with its key and
        headers, or dead-lettered with its reason. Its producers and the topics it creates are
        set to take it (Kafka's defaults stop short of an event of 1 MiB)."""
        return self.max_event_bytes + RECORD_HEADROOM

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def data_dir(self) -> Path:
        return self.state_dir / "data"

    @property
    def conf_dir(self) -> Path:
        return self.state_dir / "conf"

    @property
    def checkpoints_dir(self) -> Path:
        return self.state_dir / "checkpoints"

    @property
    def admin_token_file(self) -> Path:
        return self.conf_dir / "control" / "admin-token"

    @property
    def routers_run_dir(self) -> Path:
        """The fleet's record of each router process it runs (pid files)."""
        return self.run_dir / "routers"

    @property
    def routers_logs_dir(self) -> Path:
        return self.logs_dir / "routers"

    def job_run_dir(self, kind: str) -> Path:
        """The fleet's record of each application it runs of a kind of job (pid files):
        `backfills`, `redrives`."""
        return self.run_dir / kind

    def job_logs_dir(self, kind: str) -> Path:
        return self.logs_dir / kind

    @property
    def dashboards_dir(self) -> Path:
        """Each stream's generated Grafana dashboard model."""
        return self.state_dir / "dashboards"

    @property
    def alertmanager_urls(self) -> list[str]:
        """Every Alertmanager peer's URL: the embedded peers', or the one set."""
        if not self.is_embedded("alertmanager"):
            return [self.alertmanager_url]
        host, port = self.bind_host, self.alertmanager_port
        return [f"http://{host}:{port + 2 * n}" for n in range(self.alertmanager_replicas)]

    @property
    def alertmanager_config_file(self) -> Path:
        """Alertmanager's configuration as control generates it from the registry (the
        embedded peers load it; control asks them to reload it when it changes)."""
        return self.state_dir / "alertmanager" / "alertmanager.yml"

    @property
    def prometheus_rules_dir(self) -> Path:
        """Each stream's generated recording and alerting rules; Prometheus loads them."""
        return self.state_dir / "prometheus" / "rules"

    @property
    def prometheus_targets_dir(self) -> Path:
        """File-discovery targets: one JSON file per component; Prometheus watches the folder."""
        return self.state_dir / "prometheus" / "targets"

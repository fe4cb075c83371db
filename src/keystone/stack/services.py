"""The stack's services, one small class each over one base.

A service knows how to prepare its state (configuration, storage), the command that runs it,
the ports it takes, and how to tell that it is really healthy. Health checks go through the
client-facing address from settings, so an external service is checked the same way.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import uuid
from abc import ABC, abstractmethod
from base64 import urlsafe_b64encode
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlsplit
from xml.sax.saxutils import escape

import bcrypt
import httpx
import redis
import yaml
from confluent_kafka.admin import AdminClient
from thrift.Thrift import TException

from keystone.alerts.config import config_yaml
from keystone.alerts.publish import alertmanager_service
from keystone.contracts import fronting, http, kafka_clients, metastore
from keystone.contracts.errors import StackError
from keystone.contracts.fronting import FrontingCluster
from keystone.contracts.processes import PidFile, stop
from keystone.contracts.recovery import OPERATIONS, Job
from keystone.contracts.settings import Settings, stored_secret
from keystone.dashboards import targets
from keystone.router import jvm
from keystone.stack import kafka_security, tls


class Service(ABC):
    name: ClassVar[str]
    needs: ClassVar[tuple[str, ...]] = ()  # services that must be healthy before this starts
    binary: ClassVar[str] = "java"  # checked before starting, with the hint below
    install_hint: ClassVar[str] = "install a Java 17 runtime (Debian's openjdk-17-jre-headless)"
    start_timeout: ClassVar[float] = 120.0
    stop_signal: ClassVar[signal.Signals] = signal.SIGTERM
    stop_timeout: ClassVar[float] = 30.0
    stop_together: ClassVar[bool] = False  # `down` stops every service of the class at once

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @property
    def embedded(self) -> bool:
        return self.settings.is_embedded(self.name)

    @property
    @abstractmethod
    def address(self) -> str:
        """Where clients reach it: a URL or host:port."""

    @property
    @abstractmethod
    def ports(self) -> list[int]:
        """Ports the embedded service listens on; checked free before it starts."""

    @abstractmethod
    def argv(self) -> list[str]:
        """The command that runs it in the foreground."""

    @abstractmethod
    def healthy(self) -> bool:
        """True when it really answers (a request served, not just a port open)."""

    @property
    def user(self) -> str | None:
        return None

    @property
    def env(self) -> dict[str, str]:
        """Variables added to the process' environment."""
        return {}

    def check_installed(self) -> None:
        if shutil.which(self.binary) is None:
            raise StackError(f"{self.name} needs `{self.binary}`: {self.install_hint}")

    def check(self) -> None:  # noqa: B027 - an optional hook
        """Refuses, before any service of the stack starts, what would make this one fail to
        (a state directory made with other settings)."""

    def prepare(self) -> None:  # noqa: B027 - an optional hook
        """Writes configuration and initialises storage; idempotent, keeps existing data."""

    def on_healthy(self) -> None:  # noqa: B027 - an optional hook
        """Runs once the service answers, before the services that need it start."""

    def after_stop(self) -> None:  # noqa: B027 - an optional hook
        """Runs once `down` has stopped the service."""

    @property
    def data(self) -> Path:
        return self.settings.data_dir / self.name

    @property
    def conf(self) -> Path:
        return self.settings.conf_dir / self.name

    @property
    def log(self) -> Path:
        return self.settings.logs_dir / f"{self.name}.log"

    @property
    def pidfile(self) -> PidFile:
        return PidFile(self.settings.run_dir / f"{self.name}.pid")

    def _dirs(self) -> None:
        for d in (self.data, self.conf):
            d.mkdir(parents=True, exist_ok=True)


def _get(url: str, auth: tuple[str, str] | None = None) -> httpx.Response | None:
    """The answer to a GET when it is a 200, else None (refused, timed out, or not ready)."""
    try:
        answer = http.client().get(url, timeout=2, auth=auth)
    except httpx.HTTPError:
        return None
    return answer if answer.status_code == 200 else None


def _java(heap: str, *args: str) -> list[str]:
    return ["java", f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseG1GC", "-Djava.awt.headless=true", *args]


def _write_private(path: Path, text: str) -> None:
    """Writes a file only its owner can read: it may hold a password."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(text)


class Postgres(Service):
    """PostgreSQL from Debian's packages: the database behind the shared Hive metastore."""

    name = "postgres"
    start_timeout = 60.0
    stop_signal = signal.SIGINT  # "fast" shutdown; SIGTERM would wait for every client to leave
    database = "metastore"
    role = "keystone"

    @property
    def address(self) -> str:
        return f"{self.settings.bind_host}:{self.settings.postgres_port}"

    @property
    def ports(self) -> list[int]:
        return [self.settings.postgres_port]

    @property
    def user(self) -> str | None:
        # PostgreSQL refuses to run as root; Debian's package creates the postgres account.
        return "postgres" if os.geteuid() == 0 else None

    @property
    def password_file(self) -> Path:
        return self.settings.conf_dir / "postgres" / "password"

    @property
    def password(self) -> str:
        return self.password_file.read_text().strip()

    def check_installed(self) -> None:
        self.bin("postgres")

    @staticmethod
    def bin(tool: str) -> str:
        found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{tool}"))
        if not found:
            raise StackError(f"PostgreSQL's {tool} is missing: install Debian's postgresql")
        return found[-1]

    def prepare(self) -> None:
        self.conf.mkdir(parents=True, exist_ok=True)
        if not self.password_file.exists():
            _write_private(self.password_file, secrets.token_urlsafe(24))
        if (self.data / "PG_VERSION").exists():
            return
        self.data.mkdir(parents=True, exist_ok=True)
        pwfile = self.data.parent / ".postgres-initdb-password"
        _write_private(pwfile, self.password)
        if self.user:
            _reachable_by(self.user, self.data)
            account = pwd.getpwnam(self.user)
            for p in (self.data, pwfile):
                os.chown(p, account.pw_uid, account.pw_gid)
        try:
            result = subprocess.run(
                [
                    self.bin("initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    self.role,
                    "-E",
                    "UTF8",
                    "--auth=scram-sha-256",
                    f"--pwfile={pwfile}",
                ],
                user=self.user,
                capture_output=True,
                text=True,
                check=False,
                cwd="/",
            )
        finally:
            pwfile.unlink(missing_ok=True)
        if result.returncode != 0:
            raise StackError(f"initdb failed for {self.data}:\n{result.stderr}")

    def argv(self) -> list[str]:
        return [
            self.bin("postgres"),
            "-D",
            str(self.data),
            "-p",
            str(self.settings.postgres_port),
            "-c",
            f"listen_addresses={self.settings.bind_host}",
            "-c",
            "unix_socket_directories=",  # TCP on loopback only
        ]

    def healthy(self) -> bool:
        host, port = self.address.split(":")
        return (
            subprocess.run(
                [self.bin("pg_isready"), "-q", "-h", host, "-p", port], check=False
            ).returncode
            == 0
        )

    def on_healthy(self) -> None:
        host, port = self.address.split(":")
        result = subprocess.run(
            [self.bin("createdb"), "-h", host, "-p", port, "-U", self.role, self.database],
            env={**os.environ, "PGPASSWORD": self.password},
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0 and "already exists" not in result.stderr:
            raise StackError(f"creating the metastore database failed: {result.stderr.strip()}")


def _reachable_by(user: str, path: Path) -> None:
    """Fails clearly when `user` could not reach `path` through its parent folders."""
    for parent in reversed(path.parents):
        if not parent.stat().st_mode & stat.S_IXOTH:
            raise StackError(
                f"PostgreSQL runs as '{user}', which cannot enter {parent}: put the state "
                "directory (KEYSTONE_STATE_DIR) where other users may traverse, e.g. under /var"
            )


KEYSTORE = ("metastore.p12",)  # the embedded metastore's key store, over TLS


class Metastore(Service):
    """The Hive metastore service every Spark application shares (Thrift, on loopback)."""

    name = "metastore"
    needs = ("postgres",)

    @property
    def address(self) -> str:
        return self.settings.metastore_uri

    @property
    def ports(self) -> list[int]:
        return [self.settings.metastore_port]

    def prepare(self) -> None:
        self._dirs()
        pg = Postgres(self.settings)
        props = {
            "javax.jdo.option.ConnectionURL": f"jdbc:postgresql://{pg.address}/{pg.database}",
            "javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
            "javax.jdo.option.ConnectionUserName": pg.role,
            "javax.jdo.option.ConnectionPassword": pg.password,
            "datanucleus.schema.autoCreateAll": "true",
            "hive.metastore.schema.verification": "false",
            "hive.metastore.warehouse.dir": self.settings.warehouse_dir,
            # Hive would switch log4j to async loggers, which need a jar pyspark lacks.
            "hive.async.log.enabled": "false",
        }
        body = "\n".join(
            f"  <property><name>{k}</name><value>{escape(v)}</value></property>"
            for k, v in props.items()
        )
        _write_private(self.conf / "hive-site.xml", f"<configuration>\n{body}\n</configuration>\n")
        if self.settings.metastore_embedded_tls:
            self._certificate()

    def _certificate(self) -> None:
        """Its key and certificate as a PKCS12 key store (Thrift's Java server reads no PEM),
        and the CA that signed it, which clients trust (`stack.tls`)."""
        folder = self.settings.metastore_tls_dir
        password = self._keystore_password()

        def keystore(work: Path, key: Path, certificate: Path) -> None:
            tls.openssl(
                "pkcs12", "-export", "-inkey", key, "-in", certificate, "-name", "metastore",
                "-out", work / "metastore.p12", "-passout", "env:KEYSTORE_PASSWORD",
                env={"KEYSTORE_PASSWORD": password},
            )  # fmt: skip

        tls.issue(folder, self.settings, "keystone-metastore", "serverAuth", KEYSTORE, keystore)

    def _keystore_password(self) -> str:
        folder = self.settings.metastore_tls_dir
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o700)
        password = stored_secret(folder / "keystore-password", create=True)
        assert password is not None  # made when missing
        return password

    @property
    def env(self) -> dict[str, str]:
        if not self.settings.metastore_embedded_tls:
            return {}
        return {"KEYSTONE_METASTORE_KEYSTORE_PASSWORD": self._keystore_password()}

    def argv(self) -> list[str]:
        cp = jvm.classpath(
            self.conf,
            jvm.classes_dir(self.settings, "LoopbackMetastore"),
            jvm.PYSPARK_JARS,
            jvm.bundle_dir(self.settings, "metastore"),
        )
        host, port = self.settings.bind_host, str(self.settings.metastore_port)
        tls_args = (
            [str(self.settings.metastore_tls_dir / KEYSTORE[0])]
            if self.settings.metastore_embedded_tls
            else []
        )
        return _java(
            self.settings.metastore_heap, "-cp", cp, "LoopbackMetastore", host, port, *tls_args
        )

    def healthy(self) -> bool:
        # A request served, over TLS when it is: the launcher serves once the schema exists.
        try:
            with metastore.thrift_client(self.settings, timeout=2) as client:
                client.get_all_databases()
        except (TException, OSError):
            return False
        return True


def broker_service(node: int, cluster: FrontingCluster | None = None) -> str:
    """The service name of embedded broker `node` of a fronting cluster (home by default):
    `kafka`, `kafka-2`, ... for home (the first keeps the single broker's name and folders: a
    stack made before there could be more goes on as broker 1), `kafka-west`, `kafka-west-2`,
    ... for another."""
    base = "kafka" if cluster is None or cluster.home else f"kafka-{cluster.name}"
    return base if node == 1 else f"{base}-{node}"


class Kafka(Service):
    """One Apache Kafka broker in KRaft combined mode (broker and controller in one JVM), of
    `kafka_brokers`. One: its own quorum of one. Three: a quorum of the three controllers, so
    the metadata, like the data, survives any one of them (one controller would make its
    broker the one that must not die); the internal topics get three replicas, two in sync."""

    name = "kafka"
    stop_timeout = 60.0  # a controlled shutdown moves leadership and flushes logs
    stop_together = True

    def __init__(
        self, settings: Settings, node: int = 1, cluster: FrontingCluster | None = None
    ) -> None:
        """Broker `node` of a fronting cluster (home by default): its settings are the
        cluster's (`FrontingCluster.connect`: its ports, its brokers), so everything below
        speaks of that cluster alone."""
        self.cluster = cluster or fronting.home(settings)
        super().__init__(self.cluster.connect(settings))
        self.node = node
        self.name = broker_service(node, self.cluster)

    @property
    def embedded(self) -> bool:
        return self.settings.is_embedded("kafka")

    @property
    def address(self) -> str:
        if not self.embedded:
            return self.settings.kafka_bootstrap
        return f"{self.settings.bind_host}:{self.settings.kafka_broker_ports(self.node)[0]}"

    @property
    def ports(self) -> list[int]:
        return list(self.settings.kafka_broker_ports(self.node))

    def prepare(self) -> None:
        self._dirs()
        self.check()
        s, host = self.settings, self.settings.bind_host
        self._brokers_file.parent.mkdir(parents=True, exist_ok=True)
        self._brokers_file.write_text(f"{s.kafka_brokers} {s.kafka_security}")
        client, controller = s.kafka_broker_ports(self.node)
        replicas, in_sync = str(s.kafka_replication), str(s.kafka_min_insync_replicas)
        voters = ",".join(
            f"{n}@{host}:{s.kafka_broker_ports(n)[1]}" for n in range(1, s.kafka_brokers + 1)
        )
        quorum = (
            {"controller.quorum.bootstrap.servers": f"{host}:{controller}"}
            if s.kafka_brokers == 1
            else {"controller.quorum.voters": voters}
        )
        listeners = {
            "listeners": f"PLAINTEXT://{host}:{client},CONTROLLER://{host}:{controller}",
            "advertised.listeners": f"PLAINTEXT://{host}:{client}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        }
        formatted = (self.data / "logs" / "meta.properties").exists()
        if s.kafka_embedded_secured:
            kafka_security.make_certificates(s)
            listeners = kafka_security.broker_properties(
                s, host, client, controller, formatted=formatted
            )
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node),
            "controller.listener.names": "CONTROLLER",
            **listeners,
            **quorum,
            "log.dirs": str(self.data / "logs"),
            # Internal topics as replicated as the project's own (one broker: one replica).
            "offsets.topic.replication.factor": replicas,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": in_sync,
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": in_sync,
            "default.replication.factor": replicas,
            "min.insync.replicas": in_sync,
            # A broker that died is fenced (its partitions led elsewhere) after 4 s without a
            # heartbeat, not 9: on loopback a heartbeat is never late, and producers waiting
            # for a dead leader answer 503 for as long as this lasts.
            "broker.heartbeat.interval.ms": "1000",
            "broker.session.timeout.ms": "4000",
            "group.initial.rebalance.delay.ms": "0",
            # Topics exist only as provisioned, from validated names: a producer still holding a
            # deleted stream's topic in its metadata would otherwise create it again.
            "auto.create.topics.enable": "false",
            # Each log written back every 200 ms: left to the kernel, 30 s of writes (1.4 GB at
            # the proxy's half-peak load) went back at once, or at a segment's roll, and stalled
            # both cores for up to a second (p99 235 against 50 ms at 480 requests/s of 100).
            # Small and often: a flush holds the partition's index lock until the disk has the
            # data, so appends wait; flushed every 2 s, requests stalled 40-90 ms each time.
            "log.flush.interval.ms": "200",
            "log.flush.scheduler.interval.ms": "100",
            # An index entry per MiB of log, not per 4 KiB: an append that adds one waits out
            # any flush of that index, and at 4 KiB nearly every produce request adds one. At a
            # fixed 460 requests/s of 100 events, requests over 50 ms 0.47% -> 0.12% (6 pairs).
            "log.index.interval.bytes": "1048576",
        }
        # Private: a secured broker's holds its user's password.
        _write_private(
            self.conf / "server.properties", "".join(f"{k}={v}\n" for k, v in props.items())
        )
        (self.conf / "log4j2.properties").write_text(
            "rootLogger.level = INFO\n"
            "rootLogger.appenderRef.stdout.ref = STDOUT\n"
            "appender.stdout.type = Console\n"
            "appender.stdout.name = STDOUT\n"
            "appender.stdout.layout.type = PatternLayout\n"
            "appender.stdout.layout.pattern = [%d] %p %m (%c)%n\n"
        )
        if not formatted:
            self._format()

    @property
    def _brokers_file(self) -> Path:
        """How many brokers the stack's Kafka was made with (beside broker 1's data)."""
        return self.settings.data_dir / broker_service(1, self.cluster) / "brokers"

    def check(self) -> None:
        """Refuses brokers of another count or security than the state directory's Kafka was
        made with: its quorum's size, and its users, are formatted into its storage."""
        made = self._brokers_file.read_text().split()[:2] if self._brokers_file.exists() else None
        if not made and (self._brokers_file.parent / "logs").exists():
            made = ["1"]  # made before the count was recorded: one broker
        if made is not None and len(made) == 1:
            made.append("plaintext")  # made before the security was recorded
        wanted = [str(self.settings.kafka_brokers), self.settings.kafka_security]
        for (setting, what), was, now in zip(
            [("KAFKA_BROKERS", "broker(s)"), ("KAFKA_SECURITY", "security")],
            made or wanted,
            wanted,
            strict=True,
        ):
            if was != now:
                raise StackError(
                    f"this state directory's Kafka was made with {was} {what}, not {now}: "
                    f"that is formatted into its storage. Keep KEYSTONE_{setting}={was}, or "
                    "start afresh (`keystone stack down --purge`)"
                )

    def _cluster_id(self) -> str:
        """One id for every broker of the cluster (Kafka's: 16 random bytes, base64), made by
        the first broker formatted."""
        path = self.settings.conf_dir / broker_service(1, self.cluster) / "cluster-id"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode())
        return path.read_text().strip()

    def _format(self) -> None:
        quorum = ["--standalone"] if self.settings.kafka_brokers == 1 else []
        result = subprocess.run(
            [
                "java",
                "-cp",
                jvm.classpath(
                    jvm.classes_dir(self.settings, "KafkaStorageFormat"),
                    jvm.bundle_dir(self.settings, "kafka"),
                ),
                f"-Dlog4j2.configurationFile={self.conf / 'log4j2.properties'}",
                "KafkaStorageFormat",  # its users (passwords) on its standard input
                "format",
                *quorum,
                # One argument: an id may start with '-', which would read as an option.
                f"--cluster-id={self._cluster_id()}",
                "-c",
                str(self.conf / "server.properties"),
            ],
            input=kafka_security.scram_users(self.settings)
            if self.settings.kafka_embedded_secured
            else "",
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            said = f"{result.stdout}{result.stderr}".splitlines()
            shown = "\n".join(line for line in said if "password" not in line.lower())
            raise StackError(f"formatting Kafka's storage failed:\n{shown}")

    def on_healthy(self) -> None:
        if self.settings.kafka_embedded_secured:
            kafka_security.grant_services(self.settings)

    def argv(self) -> list[str]:
        return _java(
            self.settings.kafka_heap,
            f"-Dlog4j2.configurationFile={self.conf / 'log4j2.properties'}",
            "-cp",
            jvm.classpath(jvm.bundle_dir(self.settings, "kafka")),
            "kafka.Kafka",
            str(self.conf / "server.properties"),
        )

    def healthy(self) -> bool:
        # A metadata request answered, with this broker registered in the cluster; log_level 0
        # keeps librdkafka quiet meanwhile.
        connection = kafka_clients.librdkafka(self.settings)
        admin = AdminClient(connection | {"bootstrap.servers": self.address, "log_level": 0})
        try:
            brokers = admin.list_topics(timeout=2).brokers
        except Exception:
            return False
        return bool(brokers) if not self.embedded else self.node in brokers


class Redis(Service):
    """Redis from Debian's packages, persisted with an append-only file."""

    name = "redis"
    binary = "redis-server"
    install_hint = "install Debian's redis-server"
    start_timeout = 30.0

    @property
    def address(self) -> str:
        return self.settings.redis_url

    @property
    def ports(self) -> list[int]:
        return [self.settings.redis_port]

    @property
    def config(self) -> Path:
        return self.conf / "redis.conf"

    def prepare(self) -> None:
        """Its password, generated once like the admin token, in a file of its owner's only
        (not on the command line, which every local user can read)."""
        self._dirs()
        configured = self.settings.redis_password.get_secret_value()
        password = configured or stored_secret(self.settings.redis_password_file, create=True)
        if not password:
            raise StackError(f"cannot read Redis's password in {self.settings.redis_password_file}")
        _write_private(self.config, f"requirepass {password}\n")

    def argv(self) -> list[str]:
        return [
            "redis-server",
            str(self.config),
            "--bind",
            self.settings.bind_host,
            "--port",
            str(self.settings.redis_port),
            "--dir",
            str(self.data),
            "--appendonly",
            "yes",
            "--save",
            "",
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
        ]

    def healthy(self) -> bool:
        try:
            with redis.Redis.from_url(
                self.address, socket_timeout=2, **self.settings.redis_client_kwargs()
            ) as client:
                return bool(client.ping())
        except redis.RedisError:
            return False


class Elasticsearch(Service):
    """A real Elasticsearch 7.10 node in its own JVM, HTTP and transport on loopback."""

    name = "elasticsearch"

    @property
    def address(self) -> str:
        return self.settings.elasticsearch_url

    @property
    def ports(self) -> list[int]:
        return [self.settings.elasticsearch_port, self.settings.elasticsearch_transport_port]

    @property
    def tmp(self) -> Path:
        return self.data / "tmp"

    def prepare(self) -> None:
        self._dirs()
        self.tmp.mkdir(exist_ok=True)

    def argv(self) -> list[str]:
        cp = jvm.classpath(
            jvm.classes_dir(self.settings, "LoopbackElasticsearch"),
            jvm.bundle_dir(self.settings, "elasticsearch"),
        )
        s = self.settings
        return _java(
            s.elasticsearch_heap,
            "-Dlog4j2.formatMsgNoLookups=true",
            "-Dlog4j2.disable.jmx=true",
            f"-Djava.io.tmpdir={self.tmp}",
            "-cp",
            cp,
            "LoopbackElasticsearch",
            s.bind_host,
            str(s.elasticsearch_port),
            str(s.elasticsearch_transport_port),
            str(self.data),
        )

    def healthy(self) -> bool:
        answer = _get(f"{self.address}/_cluster/health")
        return answer is not None and answer.json().get("status") in ("green", "yellow")


class Prometheus(Service):
    """Prometheus from Debian's packages, scraping the targets components register in files."""

    name = "prometheus"
    binary = "prometheus"
    install_hint = "install Debian's prometheus"
    start_timeout = 60.0

    @property
    def address(self) -> str:
        return self.settings.prometheus_url

    @property
    def ports(self) -> list[int]:
        return [self.settings.prometheus_port]

    def prepare(self) -> None:
        self._dirs()
        s = self.settings
        s.prometheus_targets_dir.mkdir(parents=True, exist_ok=True)
        s.prometheus_rules_dir.mkdir(parents=True, exist_ok=True)
        interval = f"{s.scrape_interval_seconds}s"
        scraping = (
            "global:\n"
            f"  scrape_interval: {interval}\n"
            f"  evaluation_interval: {interval}\n"
            # Each stream's rules, written by control, which asks for a reload when they change.
            f"rule_files: ['{s.prometheus_rules_dir}/*.yml']\n"
            "scrape_configs:\n"
            "  - job_name: keystone\n"
            "    file_sd_configs:\n"
            f"      - files: ['{s.prometheus_targets_dir}/*.json']\n"
        )
        (self.conf / "prometheus.yml").write_text(scraping + _alerting(s))
        targets.write_target(
            s, "prometheus", [f"{s.bind_host}:{s.prometheus_port}"], {"component": "prometheus"}
        )

    def argv(self) -> list[str]:
        s = self.settings
        return [
            "prometheus",
            f"--config.file={self.conf / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.data}",
            f"--web.listen-address={s.bind_host}:{s.prometheus_port}",
            # No --web.enable-lifecycle: it would let any page in a browser on this machine POST
            # /-/quit. Control reloads the rules with SIGHUP (dashboards.publish). Nor any CORS
            # origin (its default is every one): no page of another site reads every tenant's
            # metrics through a browser here. Control queries it from the server.
            "--web.cors.origin=none",
        ]

    def healthy(self) -> bool:
        return _get(f"{self.address}/-/ready") is not None


class Alertmanager(Service):
    """Alertmanager from Debian's packages, loading the configuration control makes from the
    registry (`keystone.alerts.publish`); with `alertmanager_replicas` above one, the peers
    form a cluster (gossip on the port above each one's own)."""

    name = "alertmanager"
    binary = "prometheus-alertmanager"
    install_hint = "install Debian's prometheus-alertmanager"
    start_timeout = 60.0

    def __init__(self, settings: Settings, peer: int = 1) -> None:
        super().__init__(settings)
        self.peer = peer
        self.name = alertmanager_service(peer)

    @property
    def embedded(self) -> bool:
        return self.settings.is_embedded("alertmanager")

    @property
    def address(self) -> str:
        return self.settings.alertmanager_urls[self.peer - 1]

    @property
    def port(self) -> int:
        return self.settings.alertmanager_port + 2 * (self.peer - 1)

    @property
    def ports(self) -> list[int]:
        return [self.port, self.port + 1]

    def prepare(self) -> None:
        """Its login (every client of its API gives it: the API would otherwise show any
        process on the machine every receiver's address, and take silences from it), and,
        until control has made one from the registry, the configuration of no receiver but
        the admin's."""
        self._dirs()
        s = self.settings
        auth = s.alertmanager_auth(create=True)
        assert auth is not None, "made when missing"
        hashed = bcrypt.hashpw(auth[1].encode(), bcrypt.gensalt()).decode()
        users = {"basic_auth_users": {auth[0]: hashed}}
        _write_private(self.web_config, yaml.safe_dump(users))
        path = s.alertmanager_config_file
        if not path.exists():
            _write_private(path, config_yaml(s, []))
        if s.alertmanager_replicas > 1:
            self._gossip_tls()

    def _gossip_tls(self) -> None:
        """The peers' gossip in mutual TLS: a peer takes only another that shows the
        certificate the stack's own CA signed (its key kept here). Without it, any process on
        the machine could join the cluster and gossip silences of every alert."""
        folder = self.gossip_tls_dir

        def keep(work: Path, key: Path, certificate: Path) -> None:
            os.replace(key, work / "peer.key")
            os.replace(certificate, work / "peer.pem")

        tls.issue(
            folder, self.settings, "alertmanager-peer", "serverAuth,clientAuth",
            ("peer.key", "peer.pem"), keep,
        )  # fmt: skip
        ends = {"cert_file": str(folder / "peer.pem"), "key_file": str(folder / "peer.key")}
        config = {
            "tls_server_config": ends
            | {
                "client_auth_type": "RequireAndVerifyClientCert",
                "client_ca_file": str(folder / "ca.pem"),
            },
            "tls_client_config": ends | {"ca_file": str(folder / "ca.pem")},
        }
        _write_private(self.gossip_config, yaml.safe_dump(config))

    @property
    def web_config(self) -> Path:
        return self.conf / "web.yml"

    @property
    def gossip_config(self) -> Path:
        return self.conf / "gossip-tls.yml"

    @property
    def gossip_tls_dir(self) -> Path:
        """The peers' one certificate and its CA (every peer's, so beside their configuration)."""
        return self.settings.alertmanager_config_file.parent / "gossip-tls"

    def argv(self) -> list[str]:
        s = self.settings
        host = s.bind_host
        gossip = [f"--cluster.listen-address={host}:{self.port + 1}"]
        gossip += [f"--cluster.advertise-address={host}:{self.port + 1}"]
        gossip += [
            f"--cluster.peer={host}:{s.alertmanager_port + 2 * n + 1}"
            for n in range(s.alertmanager_replicas)
            if n != self.peer - 1
        ]
        gossip += [f"--cluster.tls-config={self.gossip_config}"]
        if s.alertmanager_replicas == 1:
            gossip = ["--cluster.listen-address="]  # no cluster: no gossip port
        return [
            "prometheus-alertmanager",
            f"--config.file={s.alertmanager_config_file}",
            f"--storage.path={self.data}",
            f"--web.listen-address={host}:{self.port}",
            f"--web.config.file={self.web_config}",
            f"--web.external-url={self.address}",
            *gossip,
        ]

    def healthy(self) -> bool:
        return _get(f"{self.address}/-/ready", self.settings.alertmanager_auth()) is not None


def _alerting(settings: Settings) -> str:
    """Prometheus's `alerting` section: every Alertmanager peer gets every alert, logged in
    with a password file of Prometheus's own."""
    lines = ["alerting:\n", "  alertmanagers:\n"]
    auth = settings.alertmanager_auth(create=True)
    login = ""
    if auth is not None:
        secret = settings.conf_dir / "prometheus" / "alertmanager-password"
        _write_private(secret, auth[1])
        login = f"      basic_auth: {{username: '{auth[0]}', password_file: '{secret}'}}\n"
    for url in settings.alertmanager_urls:
        parts = urlsplit(url)
        lines += [
            f"    - scheme: {parts.scheme}\n",
            f"      path_prefix: '{parts.path or '/'}'\n",
            f"      static_configs: [{{targets: ['{parts.netloc}']}}]\n",
            login,
        ]
    return "".join(lines)


class UvicornService(Service):
    """A FastAPI app of this project under uvicorn, on this very Python, its settings passed
    explicitly (the child does not share this process' working directory or .env), registered
    as a Prometheus target, healthy when its /readyz answers 200."""

    binary = "python3"
    start_timeout = 60.0
    app_factory: ClassVar[str]  # module:function

    @property
    @abstractmethod
    def port(self) -> int:
        """The port it serves on."""

    @property
    def ports(self) -> list[int]:
        return [self.port]

    @property
    def env(self) -> dict[str, str]:
        return self.settings.to_env()

    def check_installed(self) -> None:
        """It runs on this very Python."""

    def prepare(self) -> None:
        self._dirs()
        s = self.settings
        targets.write_target(s, self.name, [f"{s.bind_host}:{self.port}"], {"component": self.name})

    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "uvicorn",
            self.app_factory,
            "--factory",
            "--host",
            self.settings.bind_host,
            "--port",
            str(self.port),
            "--no-access-log",
            "--log-level",
            "warning",
        ]

    def healthy(self) -> bool:
        return _get(f"{self.address}/readyz") is not None


class IngestProxy(UvicornService):
    """The ingest proxy, several server processes behind one port, under its own launcher."""

    name = "ingest_proxy"
    needs = ("kafka", "redis")

    @property
    def address(self) -> str:
        return self.settings.proxy_url

    @property
    def port(self) -> int:
        return self.settings.proxy_port

    def argv(self) -> list[str]:
        # Its own launcher: one listening socket per server process (see ingest_proxy.serve).
        return [sys.executable, "-m", "keystone.ingest_proxy.serve"]

    @property
    def metrics_dir(self) -> Path:
        return self.settings.run_dir / "ingest_proxy-metrics"

    @property
    def env(self) -> dict[str, str]:
        return {
            **super().env,
            **self.settings.kafka_principal_env("proxy"),
            "PROMETHEUS_MULTIPROC_DIR": str(self.metrics_dir),
        }

    def prepare(self) -> None:
        super().prepare()
        shutil.rmtree(self.metrics_dir, ignore_errors=True)  # counters restart with the process
        self.metrics_dir.mkdir(parents=True)


def control_service(replica: int) -> str:
    """The service name of embedded control replica `replica` (the first keeps the one name)."""
    return "control" if replica == 1 else f"control-{replica}"


class Control(UvicornService):
    """The control service: the API, the web UI and the router fleet. With `control_replicas`
    above one, each replica serves the API on its own port and one at a time runs the fleet (a
    lease in Redis). The routers they run outlive a restart of them; `down` stops them after
    the first replica (the last stopped)."""

    name = "control"
    # The standalone master, where there is one: the fleet starts routers there at once.
    needs = ("kafka", "redis", "elasticsearch", "metastore", "prometheus", "spark-master")
    app_factory = "keystone.control.app:app_from_env"

    def __init__(self, settings: Settings, replica: int = 1) -> None:
        super().__init__(settings)
        self.replica = replica
        self.name = control_service(replica)

    @property
    def embedded(self) -> bool:
        return self.settings.is_embedded("control")

    @property
    def address(self) -> str:
        return self.settings.control_urls[self.replica - 1]

    @property
    def env(self) -> dict[str, str]:
        return {**super().env, **self.settings.kafka_principal_env("control")}

    @property
    def port(self) -> int:
        return self.settings.control_port + self.replica - 1

    def after_stop(self) -> None:
        """Stops every router, backfill and redrive the fleet started, gracefully (their Python
        process first, which stops its queries and its JVM); a backfill or redrive goes on
        where it was when the fleet starts it again."""
        if self.replica != 1:
            return
        timeout = self.settings.router_stop_timeout_seconds
        settings = self.settings
        jobs = [settings.job_run_dir(k.kind) for k in OPERATIONS.values() if issubclass(k, Job)]
        for folder in (settings.routers_run_dir, *jobs):
            for record in sorted(folder.glob("*.json")):
                stop(PidFile(record), signal.SIGTERM, timeout, group=False)


def _spark_home() -> str:
    """The pyspark distribution's folder (found without importing pyspark: the CLI must not)."""
    found = importlib.util.find_spec("pyspark")
    if found is None or found.origin is None:
        raise StackError("pyspark is not installed: run scripts/bootstrap")
    return str(Path(found.origin).parent)


def _spark_class(*args: str) -> list[str]:
    """A Spark daemon (`org.apache.spark.deploy...`) from the pyspark distribution."""
    return [str(Path(_spark_home()) / "bin" / "spark-class"), *args]


class SparkService(Service):
    """A daemon of the embedded Spark standalone cluster, from the pyspark distribution, bound
    to loopback (its web UI too: Spark binds every server to SPARK_LOCAL_IP)."""

    start_timeout = 90.0

    @property
    def embedded(self) -> bool:
        return self.settings.spark_cluster == "standalone"

    @property
    def env(self) -> dict[str, str]:
        return {
            "SPARK_HOME": _spark_home(),
            "SPARK_LOCAL_IP": self.settings.bind_host,
            "SPARK_LOG_DIR": str(self.settings.logs_dir),
            "SPARK_NO_DAEMONIZE": "1",
        }

    def prepare(self) -> None:
        self._dirs()

    def state(self) -> dict | None:
        """The master's /json/: its workers and applications (None if it does not answer)."""
        s = self.settings
        answer = _get(f"http://{s.bind_host}:{s.spark_master_ui_port}/json/")
        try:
            return answer.json() if answer is not None else None
        except ValueError:  # the UI answers before its JSON is ready
            return None


class SparkMaster(SparkService):
    name = "spark-master"

    @property
    def address(self) -> str:
        return self.settings.spark_master

    @property
    def ports(self) -> list[int]:
        return [self.settings.spark_master_port, self.settings.spark_master_ui_port]

    @property
    def env(self) -> dict[str, str]:
        # An application that does not say how many cores it wants (spark.cores.max) gets two,
        # not every core of the cluster: the project's own always say.
        return {**super().env, "SPARK_MASTER_OPTS": "-Dspark.deploy.defaultCores=2"}

    def argv(self) -> list[str]:
        s = self.settings
        return _spark_class(
            "org.apache.spark.deploy.master.Master",
            *("--host", s.bind_host, "--port", str(s.spark_master_port)),
            *("--webui-port", str(s.spark_master_ui_port)),
        )

    def healthy(self) -> bool:
        state = self.state()
        return state is not None and state.get("status") == "ALIVE"


class SparkWorker(SparkService):
    """Worker n of `spark_workers`, offering `spark_worker_cores` slots and its memory."""

    name = "spark-worker"
    needs = ("spark-master",)

    def __init__(self, settings: Settings, number: int = 1) -> None:
        super().__init__(settings)
        self.number = number
        self.name = f"spark-worker-{number}"

    @property
    def port(self) -> int:
        return self.settings.spark_worker_port + self.number - 1

    @property
    def address(self) -> str:
        return f"{self.settings.bind_host}:{self.port}"

    @property
    def ports(self) -> list[int]:
        return [self.port, self.settings.spark_worker_ui_port + self.number - 1]

    @property
    def env(self) -> dict[str, str]:
        # Finished applications' folders (executors' logs, fetched jars) kept an hour.
        cleanup = "-Dspark.worker.cleanup.enabled=true -Dspark.worker.cleanup.appDataTtl=3600"
        return {**super().env, "SPARK_WORKER_OPTS": cleanup}

    def argv(self) -> list[str]:
        s = self.settings
        return _spark_class(
            "org.apache.spark.deploy.worker.Worker",
            *("--host", s.bind_host, "--port", str(self.port)),
            *("--webui-port", str(s.spark_worker_ui_port + self.number - 1)),
            *("--cores", str(s.spark_worker_cores), "--memory", s.spark_worker_memory),
            *("--work-dir", str(self.data)),
            s.spark_master,
        )

    def healthy(self) -> bool:
        """Registered with the master, and alive there."""
        state = self.state()
        workers = state.get("workers", []) if state is not None else []
        return any(
            w.get("host") == self.settings.bind_host
            and w.get("port") == self.port
            and w.get("state") == "ALIVE"
            for w in workers
        )


SERVICES: tuple[type[Service], ...] = (
    Postgres,
    Metastore,
    Kafka,
    Redis,
    Elasticsearch,
    Prometheus,
    Alertmanager,
    SparkMaster,
    SparkWorker,
    IngestProxy,
    Control,
)


def all_services(settings: Settings) -> list[Service]:
    """The stack's services in start order; PostgreSQL only while the metastore is embedded."""
    standalone = settings.spark_cluster == "standalone"
    services: list[Service] = []
    for cls in SERVICES:
        if cls is Kafka and settings.is_embedded("kafka"):
            services += [
                Kafka(settings, n, cluster)
                for cluster in fronting.clusters(settings)
                for n in range(1, settings.kafka_brokers + 1)
            ]
        elif cls is Alertmanager and settings.is_embedded("alertmanager"):
            services += [
                Alertmanager(settings, n) for n in range(1, settings.alertmanager_replicas + 1)
            ]
        elif cls is Control and settings.is_embedded("control"):
            services += [Control(settings, n) for n in range(1, settings.control_replicas + 1)]
        elif cls is SparkWorker:
            if standalone:
                services += [SparkWorker(settings, n) for n in range(1, settings.spark_workers + 1)]
        elif cls is not SparkMaster or standalone:
            services.append(cls(settings))
    if not settings.is_embedded("metastore"):
        services = [s for s in services if s.name != "postgres"]
    return services

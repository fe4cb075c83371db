"""What each sink writes to, made ready without Spark: a Kafka output's topic, the Hive
database, an Elasticsearch index template; a Keystone output's target topic checked. Control
runs a provisioner when it deploys an output, and the router again before its query starts;
each is idempotent and returns what it made, for the owner."""

from __future__ import annotations

import httpx
from hmsclient.genthrift.hive_metastore.ttypes import (
    AlreadyExistsException,
    Database,
    NoSuchObjectException,
)
from hmsclient.hmsclient import HMSClient
from thrift.Thrift import TException

from keystone.contracts.errors import SinkError
from keystone.contracts.names import HIVE_DATABASE, fronting_topic, index_prefix
from keystone.contracts.settings import Settings
from keystone.router.sinks.route import Route
from keystone.router.topics import create_topics, missing_topics


class Provisioner:
    """Nothing to make ready (the default)."""

    def __init__(self, route: Route) -> None:
        self.route = route

    def provision(self) -> list[str]:
        return []


class KafkaProvisioner(Provisioner):
    def provision(self) -> list[str]:
        topic = self.route.stream.kafka_topics()[self.route.output.name]
        created = create_topics(self.route.settings, {topic: self.route.stream.partitions})
        return [f"topic {t}" for t in created]


class KeystoneProvisioner(Provisioner):
    def provision(self) -> list[str]:
        topic = fronting_topic(self.route.output.sink.stream)
        # The target stream is control's to provision; writing would auto-create it wrongly.
        if missing_topics(self.route.settings, [topic]):
            raise SinkError(
                f"output {self.route.name} delivers to stream "
                f"{self.route.output.sink.stream!r}, whose topic {topic} does not exist"
            )
        return []


class HiveProvisioner(Provisioner):
    def provision(self) -> list[str]:
        return ensure_database(self.route.settings)


class ElasticsearchProvisioner(Provisioner):
    def provision(self) -> list[str]:
        prefix = index_prefix(self.route.stream.name, self.route.output.name)
        # One shard per daily index, and no replicas on a single node (the embedded one).
        replicas = 0 if self.route.settings.is_embedded("elasticsearch") else 1
        name = prefix.rstrip("-")
        template = {
            "index_patterns": [f"{prefix}*"],
            "settings": {"number_of_shards": 1, "number_of_replicas": replicas},
        }
        url = f"{self.route.settings.elasticsearch_url}/_template/{name}"
        try:
            existed = httpx.head(url, timeout=30).status_code == 200
            response = httpx.put(url, json=template, timeout=30)
        except httpx.TransportError as e:
            raise SinkError(f"Elasticsearch unreachable: {e}") from e
        if response.status_code >= 300:
            raise SinkError(f"index template refused ({response.status_code}): {response.text}")
        return [] if existed else [f"index template {name}"]


def ensure_database(settings: Settings) -> list[str]:
    """Creates the Hive database of every stream's tables through the metastore's Thrift API
    (no Spark needed), where Spark itself would put it."""
    host, _, port = settings.metastore_uri.removeprefix("thrift://").partition(":")
    try:
        with HMSClient(host=host, port=int(port)) as client:
            try:
                client.get_database(HIVE_DATABASE)
                return []
            except NoSuchObjectException:
                location = f"{settings.warehouse_dir.rstrip('/')}/{HIVE_DATABASE}.db"
                try:
                    client.create_database(Database(name=HIVE_DATABASE, locationUri=location))
                except AlreadyExistsException:
                    return []  # made meanwhile by another writer
                return [f"Hive database {HIVE_DATABASE}"]
    except (TException, OSError) as e:
        raise SinkError(f"the Hive metastore at {settings.metastore_uri} failed: {e}") from e

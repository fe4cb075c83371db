"""Every service of the embedded stack is usable for real, addressed through `status --json`."""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import pytest
import redis
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry, Counter, start_http_server

from keystone.contracts import http
from keystone.contracts.errors import StackError
from keystone.contracts.settings import Settings
from keystone.dashboards import targets
from keystone.router.topics import create_topics, missing_topics
from keystone.stack import kafka_security
from keystone.stack.services import Kafka, all_services
from tests.support.kafka import consume_all, produce
from tests.support.stack import Stack, checked


def test_every_service_is_healthy(stack: Stack) -> None:
    services = stack.status()["services"]
    assert set(services) == {
        "postgres",
        "metastore",
        "kafka",
        "kafka-west",  # the suite's second fronting cluster
        "redis",
        "elasticsearch",
        "prometheus",
        "alertmanager",
        "ingest_proxy",
        "control",
    }
    for name, service in services.items():
        assert service["health"] == "healthy", name
        assert service["embedded"] and service["pid"], name


def test_kafka_record_round_trip(stack: Stack) -> None:
    topic = f"roundtrip-{uuid.uuid4().hex[:8]}"
    produce(stack.settings, topic, [(b'{"n": 1}', {"ks_guid": "g-1"})])
    [message] = consume_all(stack.settings, topic, expected=1)
    assert message.value() == b'{"n": 1}'
    assert message.headers() == [("ks_guid", b"g-1")]


def test_kafka_creates_no_topic_a_client_merely_asks_about(stack: Stack) -> None:
    # As a producer still holding a deleted stream's topic asks again for its metadata.
    topic = f"unprovisioned-{uuid.uuid4().hex[:8]}"
    asking = Producer(stack.kafka() | {"allow.auto.create.topics": True})
    asking.list_topics(topic, timeout=10)  # a metadata request that asks for its creation
    time.sleep(1)  # a creation, had the broker made one, is done by now
    assert missing_topics(stack.settings, [topic]) == [topic]


def test_redis_set_get(stack: Stack) -> None:
    with redis.Redis.from_url(
        stack.address("redis"), **stack.settings.redis_client_kwargs()
    ) as client:
        key = f"test:{uuid.uuid4()}"
        client.set(key, "value")
        assert client.get(key) == b"value"


def test_redis_refuses_a_client_without_the_password(stack: Stack) -> None:
    # Control's fleet acts on what Redis holds: nobody without the password may write there.
    with (
        redis.Redis.from_url(stack.address("redis"), socket_timeout=5) as stranger,
        pytest.raises(redis.AuthenticationError),
    ):
        stranger.set(f"keystone:router:{uuid.uuid4().hex}", "x")


def test_elasticsearch_indexes_and_finds_a_document(stack: Stack) -> None:
    url, index = stack.address("elasticsearch"), f"test-{uuid.uuid4().hex[:8]}"
    bulk = (
        json.dumps({"index": {"_index": index, "_id": "guid-1"}})
        + "\n"
        + json.dumps({"title": "keystone routes events"})
        + "\n"
    )
    response = http.client().post(
        f"{url}/_bulk?refresh=true",
        content=bulk,
        headers={"Content-Type": "application/x-ndjson"},
        timeout=30,
    )
    assert response.status_code == 200 and response.json()["errors"] is False
    hits = (
        http.client().get(f"{url}/{index}/_search", params={"q": "title:routes"}, timeout=30).json()
    )
    assert [h["_id"] for h in hits["hits"]["hits"]] == ["guid-1"]


def test_prometheus_scrapes_a_registered_target(stack: Stack) -> None:
    registry = CollectorRegistry()
    Counter("keystone_test_ticks", "A counter only this test exports", registry=registry).inc(7)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    name = f"pytest-{uuid.uuid4().hex[:8]}"
    address = f"127.0.0.1:{server.server_port}"
    targets.write_target(stack.settings, name, [address], {"component": name})
    try:
        query = f'keystone_test_ticks_total{{component="{name}"}}'
        deadline, result = time.monotonic() + 60, []
        while not result and time.monotonic() < deadline:
            answer = http.client().get(
                f"{stack.address('prometheus')}/api/v1/query", params={"query": query}
            )
            result = answer.json()["data"]["result"]
            time.sleep(1)
        assert result, f"Prometheus never scraped {address}"
        assert float(result[0]["value"][1]) == 7.0
        up = (
            http.client()
            .get(
                f"{stack.address('prometheus')}/api/v1/query",
                params={"query": f'up{{component="{name}"}}'},
            )
            .json()["data"]["result"]
        )
        assert up[0]["value"][1] == "1"
    finally:
        targets.remove_target(stack.settings, name)
        server.shutdown()
        thread.join()


def test_spark_reads_and_writes_kafka_through_the_connector(stack: Stack) -> None:
    source, target = f"spark-in-{uuid.uuid4().hex[:8]}", f"spark-out-{uuid.uuid4().hex[:8]}"
    records = [(f'{{"n": {i}}}'.encode(), {"ks_guid": f"g-{i}"}) for i in range(50)]
    produce(stack.settings, source, records)
    create_topics(stack.settings, {target: 1})
    job = stack.python("-m", "tests.stack.spark_jobs", "kafka-copy", source, target)
    out, errors = job.communicate(timeout=300)
    assert job.returncode == 0, errors[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert result["values"] == sorted(r[0].decode() for r in records)
    assert sorted(h for [[_, h]] in result["headers"]) == sorted(f"g-{i}" for i in range(50))
    copied = consume_all(stack.settings, target, expected=50)
    assert sorted(m.value() for m in copied) == sorted(r[0] for r in records)
    assert all(m.headers()[0][0] == "ks_guid" for m in copied)


def test_two_spark_applications_share_the_metastore(stack: Stack) -> None:
    database = f"shared_{uuid.uuid4().hex[:8]}"
    # Two applications at once, each creating and writing its own partitioned table.
    jobs = [
        stack.python("-m", "tests.stack.spark_jobs", "hive-write", database, table, str(rows))
        for table, rows in (("first", 30), ("second", 20))
    ]
    for job in jobs:
        _, errors = job.communicate(timeout=400)
        assert job.returncode == 0, errors[-3000:]
    # A third application sees both tables, their partitions and their rows: one query of
    # both (a table it did not find would fail it; a partition not in the metastore would
    # leave its rows out).
    counts = checked(
        stack.keystone(
            "sql",
            f"SELECT writer, dateint, hour, count(*) AS n FROM "
            f"(SELECT * FROM {database}.first UNION ALL SELECT * FROM {database}.second) "
            "GROUP BY writer, dateint, hour ORDER BY writer, hour",
            "--json",
        )
    )
    assert [json.loads(line) for line in counts.stdout.splitlines()] == [
        {"writer": "first", "dateint": 20261121, "hour": 0, "n": 15},
        {"writer": "first", "dateint": 20261121, "hour": 1, "n": 15},
        {"writer": "second", "dateint": 20261121, "hour": 0, "n": 10},
        {"writer": "second", "dateint": 20261121, "hour": 1, "n": 10},
    ]


def test_sql_reports_a_bad_query_clearly(stack: Stack) -> None:
    result = stack.keystone("sql", "SELECT * FROM no_such_db.no_such_table")
    assert result.returncode == 1
    assert "error: the query failed" in result.stderr
    assert "no_such_table" in result.stderr


def test_the_cluster_stack_has_each_broker_worker_and_control_process(tmp_path) -> None:
    settings = Settings(
        state_dir=tmp_path,
        kafka_brokers=3,
        spark_cluster="standalone",
        control_replicas=2,
        alertmanager_replicas=2,
        fronting_clusters="east,west",
    )
    names = [s.name for s in all_services(settings)]
    assert names == [
        "postgres",
        "metastore",
        *("kafka", "kafka-2", "kafka-3", "kafka-west", "kafka-west-2", "kafka-west-3"),
        *("redis", "elasticsearch", "prometheus", "alertmanager", "alertmanager-2"),
        *("spark-master", "spark-worker-1", "spark-worker-2"),
        "ingest_proxy",
        *("control", "control-2"),
    ]
    ports = [p for s in all_services(settings) for p in s.ports]
    assert len(ports) == len(set(ports))  # no two services on one port


def test_a_kafka_made_with_one_broker_is_not_taken_for_three(tmp_path) -> None:
    (tmp_path / "data" / "kafka" / "logs").mkdir(parents=True)  # a stack made before
    with pytest.raises(StackError, match="KEYSTONE_KAFKA_BROKERS=1"):
        Kafka(Settings(state_dir=tmp_path, kafka_brokers=3)).prepare()
    Kafka(Settings(state_dir=tmp_path)).prepare()  # as it was made: goes on
    assert (tmp_path / "data" / "kafka" / "brokers").read_text() == "1 plaintext"


def test_a_kafka_made_in_plaintext_is_not_taken_for_a_secured_one(tmp_path) -> None:
    (tmp_path / "data" / "kafka" / "logs").mkdir(parents=True)  # a stack made before
    # Its users are formatted into its storage: refused, before anything is made for them.
    with pytest.raises(StackError, match="KEYSTONE_KAFKA_SECURITY=plaintext"):
        Kafka(Settings(state_dir=tmp_path, kafka_security="sasl_ssl")).prepare()
    assert not (tmp_path / "conf" / "kafka" / "users").exists()


def test_the_brokers_certificate_is_made_again_for_new_addresses_only(tmp_path) -> None:
    settings = Settings(state_dir=tmp_path, kafka_security="sasl_ssl")
    kafka_security.make_certificates(settings)
    store, ca = settings.kafka_tls_dir / "broker-keystore.pem", settings.kafka_tls_dir / "ca.pem"
    first = (store.read_text(), ca.read_text())
    kafka_security.make_certificates(settings)
    assert (store.read_text(), ca.read_text()) == first  # made once
    moved = Settings(state_dir=tmp_path, kafka_security="sasl_ssl", bind_host="127.0.0.2")
    kafka_security.make_certificates(moved)
    assert store.read_text() != first[0] and ca.read_text() != first[1]  # a new CA signed it
    shown = subprocess.run(
        ["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in", str(store)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "IP Address:127.0.0.2" in shown and "IP Address:127.0.0.1" in shown
    assert not list(settings.kafka_tls_dir.rglob("*.key"))  # nothing left to sign another


def test_a_formatted_kafkas_lost_password_is_refused_not_made_anew(tmp_path) -> None:
    settings = Settings(state_dir=tmp_path, kafka_security="sasl_ssl")
    made = kafka_security.passwords(settings, create=True)
    assert kafka_security.passwords(settings, create=False) == made
    settings.kafka_password_file("router").unlink()
    with pytest.raises(StackError, match="users/router is missing"):
        kafka_security.passwords(settings, create=False)
    assert not settings.kafka_password_file("router").exists()

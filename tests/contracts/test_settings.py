from pathlib import Path

import pytest
from pydantic import ValidationError

from keystone.contracts.settings import Settings


def test_addresses_derive_from_ports_and_host(tmp_path: Path) -> None:
    s = Settings(state_dir=tmp_path, bind_host="127.0.0.2", kafka_port=1111, redis_port=2222)
    assert s.kafka_bootstrap == "127.0.0.2:1111"
    assert s.redis_url == "redis://127.0.0.2:2222/0"
    assert s.metastore_uri == "thrift://127.0.0.2:19083"
    assert s.warehouse_dir == (tmp_path / "warehouse").as_uri()
    assert all(s.is_embedded(name) for name in ("kafka", "redis", "metastore", "postgres"))


def test_an_explicit_address_makes_that_service_external(tmp_path: Path) -> None:
    s = Settings(
        state_dir=tmp_path, kafka_bootstrap="broker-1:9092", metastore_uri="thrift://hms:9083"
    )
    assert s.kafka_bootstrap == "broker-1:9092"
    assert not s.is_embedded("kafka")
    assert not s.is_embedded("metastore") and not s.is_embedded("postgres")
    assert s.is_embedded("redis")


def test_environment_variables_are_read(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KEYSTONE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KEYSTONE_ELASTICSEARCH_URL", "http://search:9200")
    s = Settings()
    assert s.state_dir == tmp_path / "state"
    assert s.run_dir == tmp_path / "state" / "run"
    assert s.elasticsearch_url == "http://search:9200" and not s.is_embedded("elasticsearch")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("KEYSTONE_KAFKA_LINGER_MS", "-1"),
        ("KEYSTONE_KAFKA_LINGER_MS", "900001"),
        ("KEYSTONE_KAFKA_QUEUE_MAX_MESSAGES", "0"),
        ("KEYSTONE_KAFKA_ACK_TIMEOUT_SECONDS", "0"),  # librdkafka: wait forever
        ("KEYSTONE_PROXY_WORKERS", "0"),
    ],
)
def test_a_producer_setting_out_of_range_is_refused_by_name(
    monkeypatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError, match=name.removeprefix("KEYSTONE_").lower()):
        Settings()


def test_three_brokers_give_their_addresses_three_replicas_and_two_in_sync() -> None:
    s = Settings(kafka_brokers=3)
    assert s.kafka_bootstrap == "127.0.0.1:19092,127.0.0.1:19094,127.0.0.1:19096"
    assert [s.kafka_broker_ports(n) for n in (1, 2, 3)] == [
        (19092, 19093),
        (19094, 19095),
        (19096, 19097),
    ]
    assert (s.kafka_replication, s.kafka_min_insync_replicas) == (3, 2)
    one = Settings()
    assert (one.kafka_replication, one.kafka_min_insync_replicas) == (1, 1)
    external = Settings(kafka_bootstrap="b1:9092,b2:9092", kafka_replication=3)
    assert external.kafka_min_insync_replicas == 2 and not external.is_embedded("kafka")


def test_a_standalone_cluster_is_the_default_master_and_replicas_each_have_a_port() -> None:
    assert Settings().spark_master == "local[*]"
    assert Settings(spark_cluster="standalone").spark_master == "spark://127.0.0.1:17077"
    assert Settings(spark_cluster="standalone", spark_master="yarn").spark_master == "yarn"
    assert Settings(control_replicas=2).control_urls == [
        "http://127.0.0.1:18081",
        "http://127.0.0.1:18082",
    ]
    assert Settings(control_url="http://lb:8081", control_replicas=2).control_urls == [
        "http://lb:8081"
    ]

"""The fronting clusters as settings name them: how a client of each connects, the keys of a
router's queries on each, and the registry's record of which takes writes."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from keystone.contracts import fronting
from keystone.contracts.fronting import Active, query_key, split_key
from keystone.contracts.settings import Settings


def test_one_cluster_by_default_whose_clients_connect_as_before() -> None:
    settings = Settings()
    [home] = fronting.clusters(settings)
    assert (home.name, home.home) == ("main", True)
    assert home.connect(settings) is settings


def test_embedded_clusters_each_listen_a_hundred_ports_on() -> None:
    settings = Settings(fronting_clusters="east, west", kafka_port=29092, kafka_brokers=3)
    east, west = fronting.clusters(settings)
    assert east.connect(settings).kafka_bootstrap == settings.kafka_bootstrap
    connected = west.connect(settings)
    assert connected.kafka_bootstrap == "127.0.0.1:29192,127.0.0.1:29194,127.0.0.1:29196"
    assert connected.kafka_broker_ports(1) == (29192, settings.kafka_controller_port + 100)
    assert connected.is_embedded("kafka")  # still the stack's own
    assert settings.to_env()["KEYSTONE_FRONTING_CLUSTERS"] == "east,west"


def test_external_clusters_are_named_with_their_brokers() -> None:
    settings = Settings(
        kafka_bootstrap="e1:9092,e2:9092",
        fronting_clusters="east,west",
        fronting_bootstrap="west=w1:9092",
    )
    east, west = fronting.clusters(settings)
    assert east.connect(settings).kafka_bootstrap == "e1:9092,e2:9092"
    assert west.connect(settings).kafka_bootstrap == "w1:9092"
    again = Settings(**{"kafka_bootstrap": "e1:9092,e2:9092", **_env(settings)})
    assert again.fronting_bootstrap == settings.fronting_bootstrap


def _env(settings: Settings) -> dict[str, str]:
    env = settings.to_env()
    return {
        "fronting_clusters": env["KEYSTONE_FRONTING_CLUSTERS"],
        "fronting_bootstrap": env["KEYSTONE_FRONTING_BOOTSTRAP"],
    }


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"fronting_clusters": "east,east"}, "distinct names"),
        ({"fronting_clusters": "East"}, "distinct names"),
        ({"fronting_clusters": "a@b"}, "distinct names"),
        ({"fronting_clusters": ""}, "at least one"),
        (
            {"fronting_clusters": "east", "fronting_bootstrap": "west=w:1"},
            "fronting_clusters does not",
        ),
        ({"fronting_clusters": "east,west", "fronting_bootstrap": "west=w:1"}, "embedded"),
        ({"kafka_bootstrap": "k:1", "fronting_clusters": "east,west"}, "brokers of ['west']"),
        (
            {
                "kafka_bootstrap": "k:1",
                "fronting_clusters": "a,b",
                "fronting_bootstrap": "a=x:1;b=y:1",
            },
            "home fronting cluster",
        ),
        (
            {
                "kafka_bootstrap": "k:1,k:2",
                "fronting_clusters": "a,b",
                "fronting_bootstrap": "b=k:2",
            },
            "must not share brokers",
        ),
        ({"fronting_bootstrap": "west"}, "name=host:port"),
    ],
)
def test_what_cannot_be_a_cluster_is_refused_at_start(given: dict, said: str) -> None:
    with pytest.raises(ValidationError, match=said.replace("[", r"\[").replace("]", r"\]")):
        Settings(**given)


def test_a_querys_key_is_its_name_at_home_and_names_another_cluster() -> None:
    east, west = fronting.clusters(Settings(fronting_clusters="east,west"))
    assert query_key("search", east) == "search" and query_key("search", None) == "search"
    assert query_key("search", west) == "search@west"
    assert split_key("search@west") == ("search", "west") and split_key("_stream") == (
        "_stream",
        None,
    )
    settings = Settings(fronting_clusters="east,west")
    assert fronting.query_keys(settings, "_archive") == ["_archive", "_archive@west"]


def test_the_record_leaves_to_home_what_names_a_cluster_no_longer_there() -> None:
    active = Active(cluster="south", streams={"a": "west", "b": "east", "c": "gone"})
    assert active.within(["east", "west"]) == Active(cluster="east", streams={"a": "west"})
    assert active.of("a") == "west" and active.of("zzz") == "south"
    with pytest.raises(Exception, match="no fronting cluster 'gone'"):
        fronting.cluster(Settings(fronting_clusters="east,west"), "gone")

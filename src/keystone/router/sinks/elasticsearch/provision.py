"""An Elasticsearch output's index template: one shard per daily index."""

from __future__ import annotations

import httpx

from keystone.contracts.elasticsearch import Connection
from keystone.contracts.errors import SinkError
from keystone.contracts.sinks import ElasticsearchSink
from keystone.router.sinks.provision import Provisioner


class ElasticsearchProvisioner(Provisioner):
    @property
    def prefix(self) -> str:
        sink = self.route.output.sink
        assert isinstance(sink, ElasticsearchSink), "an Elasticsearch output's provisioner"
        return sink.index_prefix(self.route.stream.name, self.route.output.name)

    def make(self) -> list[str]:
        prefix = self.prefix
        # One shard per daily index, and no replicas on a single node (the embedded one).
        replicas = 0 if self.route.settings.is_embedded("elasticsearch") else 1
        name = prefix.rstrip("-")
        template = {
            "index_patterns": [f"{prefix}*"],
            "settings": {"number_of_shards": 1, "number_of_replicas": replicas},
        }
        path = f"/_template/{name}"
        try:
            with Connection.of(self.route.settings).client(timeout=30) as es:
                existed = es.head(path).status_code == 200
                response = es.put(path, json=template)
        except httpx.TransportError as e:
            raise SinkError(f"Elasticsearch unreachable: {e}") from e
        if response.status_code >= 300:
            raise SinkError(f"index template refused ({response.status_code}): {response.text}")
        return [] if existed else [f"index template {name}"]

    def unmake(self) -> list[str]:
        """The shadow's indices, then their template (an index made meanwhile would take it)."""
        name = self.prefix.rstrip("-")
        try:
            with Connection.of(self.route.settings).client(timeout=30) as es:
                # Wildcards in a delete: allowed on an index pattern of the shadow's own only.
                indices = es.get(f"/_cat/indices/{self.prefix}*", params={"format": "json"})
                names = [i["index"] for i in indices.json()] if indices.status_code == 200 else []
                for index in names:
                    _gone(es.delete(f"/{index}"), f"index {index}")
                _gone(es.delete(f"/_template/{name}"), f"index template {name}")
        except httpx.TransportError as e:
            raise SinkError(f"Elasticsearch unreachable: {e}") from e
        return [*(f"index {i}" for i in names), f"index template {name}"]


def _gone(response: httpx.Response, what: str) -> None:
    if response.status_code >= 300 and response.status_code != 404:
        raise SinkError(f"removing {what} failed ({response.status_code}): {response.text}")

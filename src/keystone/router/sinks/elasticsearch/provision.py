"""An Elasticsearch output's index template: one shard per daily index."""

from __future__ import annotations

import httpx

from keystone.contracts.elasticsearch import Connection
from keystone.contracts.errors import SinkError
from keystone.contracts.names import index_prefix
from keystone.router.sinks.provision import Provisioner


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

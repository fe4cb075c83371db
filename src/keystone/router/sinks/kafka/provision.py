"""A Kafka output's topic, made with the stream's partitions if it is not there."""

from __future__ import annotations

from keystone.router.sinks.provision import Provisioner
from keystone.router.topics import create_topics


class KafkaProvisioner(Provisioner):
    def provision(self) -> list[str]:
        topic = self.route.stream.kafka_topics()[self.route.output.name]
        created = create_topics(self.route.settings, {topic: self.route.stream.partitions})
        return [f"topic {t}" for t in created]

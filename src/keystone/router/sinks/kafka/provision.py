"""A Kafka output's topic, made with the stream's partitions if it is not there."""

from __future__ import annotations

from keystone.router.sinks.provision import Provisioner
from keystone.router.topics import create_topics, delete_topics


class KafkaProvisioner(Provisioner):
    @property
    def topic(self) -> str:
        route = self.route
        topic = route.output.sink.owned_topic(route.stream.name, route.output.name)
        assert topic is not None, "a Kafka output owns its topic"
        return topic

    def make(self) -> list[str]:
        created = create_topics(self.route.settings, {self.topic: self.route.stream.partitions})
        return [f"topic {t}" for t in created]

    def unmake(self) -> list[str]:
        delete_topics(self.route.settings, [self.topic])
        return [f"topic {self.topic}"]

"""A Keystone output's target: the other stream's fronting topic, which must be there; a
shadow's records go to a topic of its own instead, made and removed as a Kafka output's."""

from __future__ import annotations

from keystone.contracts.errors import SinkError
from keystone.contracts.names import fronting_topic
from keystone.router.sinks.kafka.provision import KafkaProvisioner
from keystone.router.topics import missing_topics


class KeystoneProvisioner(KafkaProvisioner):
    def make(self) -> list[str]:
        if self.route.shadow:
            return super().make()
        topic = fronting_topic(self.route.output.sink.stream)
        # The target stream is control's to provision; writing would auto-create it wrongly.
        if missing_topics(self.route.settings, [topic]):
            raise SinkError(
                f"output {self.route.name} delivers to stream "
                f"{self.route.output.sink.stream!r}, whose topic {topic} does not exist"
            )
        return []

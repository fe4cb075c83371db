"""A Keystone output's target: the other stream's fronting topic, which must be there."""

from __future__ import annotations

from keystone.contracts.errors import SinkError
from keystone.contracts.names import fronting_topic
from keystone.router.sinks.provision import Provisioner
from keystone.router.topics import missing_topics


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

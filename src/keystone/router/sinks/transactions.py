"""Exactly-once Kafka and Keystone outputs: each micro-batch written in Kafka transactions that
commit, with its records, where in the fronting topic they were read.

The writing is the JVM's (router/java/TransactionalKafkaWriter.java), on the executors, one
transaction per input partition of the batch, by the producer `<group>.<partition>`; the group
(`contracts.names.transactional_group`) names the output and its query, the id Spark keeps in
the checkpoint. A batch Spark runs again after a crash reads the positions the group holds and
writes only the records past them: nothing twice, nothing left out. Why it holds:

- a killed router's open transaction is aborted by the next producer of its id (at the latest
  by the broker, `kafka_transaction_timeout_ms` after it began), and its committed ones hold
  both the records and the position;
- a task run twice (a retry, a speculative copy) uses the same id: the later fences the
  earlier, whose commit then fails;
- a broker restart mid-commit fails the task, and the next attempt finds the commit done or
  undone (the position is read stable: a pending commit is waited for);
- more partitions in the fronting topic: new producers, whose positions start empty;
- a rewind starts a new checkpoint, a new query id: a new group, so its replay is written.

Readers of the output topic read with `isolation.level=read_committed`; a `read_uncommitted`
reader also sees the records of aborted transactions (a killed router's batch, then its replay).
"""

from __future__ import annotations

import json
import logging

from pyspark.sql import DataFrame

from keystone.contracts import kafka_clients
from keystone.contracts.names import fronting_topic, transactional_group
from keystone.router.counts import Outcome
from keystone.router.sinks.route import Route

log = logging.getLogger(__name__)

# The counts TransactionalKafkaWriter.write returns, in its order.
WRITTEN, DEAD_LETTERED, SKIPPED, TRANSACTIONS = range(4)


class Transactions:
    """One query's transactional writes (a query started again gets a new one)."""

    def __init__(self, route: Route) -> None:
        self.route = route
        self._group: str | None = None

    @property
    def group(self) -> str:
        """The output's group for this query, from the id Spark keeps in the checkpoint (there
        once the query has started, so before its first batch)."""
        if self._group is None:
            metadata = json.loads((self.route.checkpoint / "metadata").read_text())
            route = self.route
            self._group = transactional_group(route.stream.name, route.output.name, metadata["id"])
        return self._group

    def write(self, frame: DataFrame, batch_id: int) -> Outcome:
        """Writes the batch (the record writer's frame with source positions) before
        returning, or raises: its transactions are then aborted, and the query, started again,
        runs the batch again."""
        settings, stream = self.route.settings, self.route.stream.name
        config = kafka_clients.java(settings) | {
            "max.request.size": str(settings.max_record_bytes),
            "transaction.timeout.ms": str(settings.kafka_transaction_timeout_ms),
            "linger.ms": str(settings.router_kafka_linger_ms),
        }
        jvm = frame.sparkSession.sparkContext._jvm
        assert jvm is not None
        counts = jvm.TransactionalKafkaWriter.write(
            frame._jdf,
            config,
            self.group,
            fronting_topic(stream),
            self.route.dead_letter_topic,
            batch_id,
            str(settings.state_dir / "faults") if settings.fault_switches else None,
        )
        if counts[SKIPPED]:
            log.info(
                "batch %d of %s: %d records were committed before, not written again",
                batch_id,
                self.route.name,
                counts[SKIPPED],
            )
        # What a failed attempt committed was not counted then: it is delivered, found now.
        return Outcome(
            delivered=counts[WRITTEN] + counts[SKIPPED],
            dead_lettered=counts[DEAD_LETTERED],
            transactions=counts[TRANSACTIONS],
        )

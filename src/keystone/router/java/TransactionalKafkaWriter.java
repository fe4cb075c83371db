import java.io.File;
import java.io.Serializable;
import java.time.Duration;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsOptions;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsSpec;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.spark.api.java.function.ForeachPartitionFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.util.LongAccumulator;

/**
 * Writes one micro-batch of an exactly-once Kafka or Keystone output, each input partition's
 * records in one Kafka transaction that also commits where they came from.
 *
 * The batch's rows keep the partition and offset of the fronting record they were routed from.
 * Each task writes the rows of one input partition as the transactional producer
 * `<group>.<partition>`, where the group names the output and its query (the checkpoint's id):
 *
 *   1. `initTransactions()` fences every earlier producer of that id (a killed router's, a
 *      failed or speculative attempt of the same task) and aborts its open transaction;
 *   2. the group's committed offset for the input partition is read, stable (a pending
 *      transactional commit is waited for): every row before it is already in the output;
 *   3. the rows from there are sent, and the offset past the last of them is committed to the
 *      group in the same transaction (`sendOffsetsToTransaction`), with the batch's id; a task
 *      that writes for longer than a third of the transaction timeout commits as it goes.
 *
 * So a batch Spark runs again after a crash writes only what no transaction committed, however
 * far the earlier attempt got, and a reader with `isolation.level=read_committed` sees each
 * record once. A rewind (or a checkpoint started afresh) is a new query id: a new group, whose
 * positions start empty. Steps 1 and 2 are taken once per producer: after a commit it waits in
 * this JVM for the partition's next batch (a {@link Writer}), knowing its position.
 *
 * Test-only fault switch, when `faults` names a folder (the `fault_switches` setting): a file
 * `<faults>/<transactional id>.<point>` (point `after-send` or `after-commit`) makes the next
 * commit of that producer fail once at that point; the task that deletes the file fails.
 */
public final class TransactionalKafkaWriter {
    // The counts `write` returns, in this order.
    static final int WRITTEN = 0;
    static final int DEAD_LETTERED = 1;
    static final int SKIPPED = 2;
    static final int TRANSACTIONS = 3;

    private TransactionalKafkaWriter() {}

    /**
     * Writes `batch` (columns key, value, headers, topic, source_partition, source_offset) and
     * returns how many records it wrote (delivered and dead-lettered), how many it skipped as
     * committed before, and the transactions it committed. Throws if any task failed: its
     * transaction is aborted, and the batch must be run again.
     */
    public static long[] write(
            Dataset<Row> batch,
            Map<String, String> producerConfig,
            String group,
            String sourceTopic,
            String deadLetterTopic,
            long batchId,
            String faults) {
        LongAccumulator[] counts = new LongAccumulator[4];
        for (int i = 0; i < counts.length; i++) {
            counts[i] = batch.sparkSession().sparkContext().longAccumulator();
        }
        Task task = new Task(
                new HashMap<>(producerConfig), group, sourceTopic, deadLetterTopic, batchId,
                faults, counts);
        batch.foreachPartition(task);
        long[] totals = new long[counts.length];
        for (int i = 0; i < counts.length; i++) {
            totals[i] = counts[i].value();
        }
        return totals;
    }

    static final class Task implements ForeachPartitionFunction<Row>, Serializable {
        private final HashMap<String, String> config;
        private final String group;
        private final String sourceTopic;
        private final String deadLetterTopic;
        private final long batchId;
        private final String faults;
        private final LongAccumulator[] counts;

        Task(HashMap<String, String> config, String group, String sourceTopic,
                String deadLetterTopic, long batchId, String faults, LongAccumulator[] counts) {
            this.config = config;
            this.group = group;
            this.sourceTopic = sourceTopic;
            this.deadLetterTopic = deadLetterTopic;
            this.batchId = batchId;
            this.faults = faults;
            this.counts = counts;
        }

        @Override
        public void call(Iterator<Row> rows) throws Exception {
            if (!rows.hasNext()) {
                return;  // nothing routed from this input partition: nothing to commit
            }
            Row first = rows.next();
            int partition = first.getInt(first.fieldIndex("source_partition"));
            String id = group + "." + partition;
            TopicPartition source = new TopicPartition(sourceTopic, partition);
            Writer writer = Writer.take(id, config, source, group);
            long written = 0;
            long deadLettered = 0;
            long skipped = 0;
            long last = -1;
            // A transaction open longer than its timeout is aborted by the broker, and a batch
            // run again would take as long again: a long task commits as it goes.
            long chunkMs = Long.parseLong(config.get("transaction.timeout.ms")) / 3;
            try {
                for (Row row = first; row != null; row = rows.hasNext() ? rows.next() : null) {
                    int from = row.getInt(row.fieldIndex("source_partition"));
                    if (from != partition) {  // Spark's Kafka source splits, never merges
                        throw new IllegalStateException(
                                "a task holds input partitions " + partition + " and " + from);
                    }
                    long offset = row.getLong(row.fieldIndex("source_offset"));
                    if (offset < writer.position) {
                        skipped++;
                        continue;
                    }
                    writer.begin();
                    String topic = row.getString(row.fieldIndex("topic"));
                    writer.producer.send(record(row, topic));
                    if (topic.equals(deadLetterTopic)) {
                        deadLettered++;
                    } else {
                        written++;
                    }
                    last = Math.max(last, offset);
                    if (System.currentTimeMillis() - writer.began > chunkMs) {
                        commit(writer, id, source, last);
                    }
                }
                if (writer.open) {
                    commit(writer, id, source, last);
                }
            } catch (Throwable e) {
                writer.discard();
                throw e;
            }
            writer.release();
            counts[WRITTEN].add(written);
            counts[DEAD_LETTERED].add(deadLettered);
            counts[SKIPPED].add(skipped);
        }

        /** The open transaction committed, with the input's position past `last`. */
        private void commit(Writer writer, String id, TopicPartition source, long last) {
            writer.producer.sendOffsetsToTransaction(
                    Collections.singletonMap(
                            source, new OffsetAndMetadata(last + 1, "batch " + batchId)),
                    new ConsumerGroupMetadata(group));
            fault(id, "after-send");
            writer.producer.commitTransaction();
            writer.open = false;
            writer.position = last + 1;
            counts[TRANSACTIONS].add(1);
            fault(id, "after-commit");
        }

        private static ProducerRecord<byte[], byte[]> record(Row row, String topic) {
            RecordHeaders headers = new RecordHeaders();
            List<Row> given = row.getList(row.fieldIndex("headers"));
            if (given != null) {
                for (Row header : given) {
                    headers.add(header.getString(0), (byte[]) header.get(1));
                }
            }
            byte[] key = (byte[]) row.get(row.fieldIndex("key"));
            byte[] value = (byte[]) row.get(row.fieldIndex("value"));
            return new ProducerRecord<>(topic, null, key, value, headers);
        }

        private void fault(String id, String point) {
            if (faults != null && new File(faults, id + "." + point).delete()) {
                throw new IllegalStateException("test fault: " + point + " of " + id);
            }
        }
    }

    /**
     * A transactional producer and the position it last committed, kept in this JVM between
     * batches (a producer's start and `initTransactions()` cost more than a small batch's
     * writes). A task takes its id's writer for itself and gives it back only after a commit,
     * so a writer in the pool knows where its output is. A newer producer of the id fences it:
     * its next transaction then fails (nothing of it commits) and it is dropped.
     */
    static final class Writer {
        private static final ConcurrentHashMap<String, Writer> IDLE = new ConcurrentHashMap<>();
        // The admin client of the connection last asked for (bootstrap servers and security:
        // the config's keys that are not the producer's own); one of another connection (a
        // rotated password, say) replaces it.
        private static Map<String, String> adminConnection;
        private static Admin admin;
        private static final long IDLE_MS = 60_000;  // then closed: a rewound or stopped query's

        final String id;
        final Map<String, String> config;
        final KafkaProducer<byte[], byte[]> producer;
        long position;  // the next input offset to write; -1 when none was ever committed
        boolean open;
        long began;  // when its open transaction began
        long used = System.currentTimeMillis();

        private Writer(String id, Map<String, String> config, long position,
                KafkaProducer<byte[], byte[]> producer) {
            this.id = id;
            this.config = config;
            this.position = position;
            this.producer = producer;
        }

        /**
         * The id's writer: the pool's, or a new one at the group's committed position, whose
         * `initTransactions()` fences every earlier producer of the id and aborts its open
         * transaction.
         */
        static Writer take(String id, Map<String, String> config, TopicPartition source,
                String group) throws Exception {
            sweep();
            Writer pooled = IDLE.remove(id);
            // Kept only while the group is where it left it: else another producer of the id
            // (a retry elsewhere) has committed since, and fenced it.
            if (pooled != null && pooled.config.equals(config)
                    && committed(config, group, source) == pooled.position) {
                return pooled;
            }
            if (pooled != null) {
                pooled.discard();
            }
            Properties props = new Properties();
            props.putAll(config);
            props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, id);
            props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
            props.put(ProducerConfig.ACKS_CONFIG, "all");
            KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(
                    props, new ByteArraySerializer(), new ByteArraySerializer());
            try {
                producer.initTransactions();
                return new Writer(id, config, committed(config, group, source), producer);
            } catch (Exception e) {
                producer.close(Duration.ZERO);
                throw e;
            }
        }

        void begin() {
            if (!open) {
                producer.beginTransaction();
                open = true;
                began = System.currentTimeMillis();
            }
        }

        /** Back to the pool, its transaction committed. */
        void release() {
            used = System.currentTimeMillis();
            Writer replaced = IDLE.put(id, this);
            if (replaced != null) {
                replaced.discard();  // one task per id at a time: not expected
            }
        }

        /** Closed, its open transaction aborted (unless it was fenced: then it is already). */
        void discard() {
            try {
                if (open) {
                    producer.abortTransaction();
                }
            } catch (Exception ignored) {
                // fenced, or the broker is away: the next producer of the id aborts it, or the
                // broker does on the transaction's timeout
            } finally {
                producer.close(Duration.ZERO);
            }
        }

        private static void sweep() {
            long now = System.currentTimeMillis();
            for (Writer writer : IDLE.values()) {
                if (now - writer.used > IDLE_MS && IDLE.remove(writer.id, writer)) {
                    writer.discard();
                }
            }
        }

        private static synchronized Admin admin(Map<String, String> connection) {
            if (!connection.equals(adminConnection)) {
                if (admin != null) {
                    admin.close(Duration.ZERO);
                }
                Properties props = new Properties();
                props.putAll(connection);
                admin = Admin.create(props);
                adminConnection = connection;
            }
            return admin;
        }

        /** The group's committed offset of the input partition, read stable. */
        private static long committed(Map<String, String> config, String group,
                TopicPartition source) throws Exception {
            Map<String, String> connection = new HashMap<>();
            config.forEach((key, value) -> {
                if (key.equals("bootstrap.servers") || key.startsWith("security.")
                        || key.startsWith("sasl.") || key.startsWith("ssl.")) {
                    connection.put(key, value);
                }
            });
            Admin admin = admin(connection);
            ListConsumerGroupOffsetsSpec spec = new ListConsumerGroupOffsetsSpec()
                    .topicPartitions(List.of(source));
            Map<TopicPartition, OffsetAndMetadata> offsets = admin
                    .listConsumerGroupOffsets(
                            Map.of(group, spec),
                            new ListConsumerGroupOffsetsOptions().requireStable(true))
                    .partitionsToOffsetAndMetadata(group)
                    .get();
            OffsetAndMetadata at = offsets.get(source);
            return at == null ? -1 : at.offset();
        }
    }
}

import java.io.File;
import java.io.Serializable;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsOptions;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsSpec;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
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
 *      group in the same transaction (`sendOffsetsToTransaction`), with the batch's id.
 *
 * So a batch Spark runs again after a crash writes only what no transaction committed, however
 * far the earlier attempt got, and a reader with `isolation.level=read_committed` sees each
 * record once. A rewind (or a checkpoint started afresh) is a new query id: a new group, whose
 * positions start empty.
 *
 * Test-only fault switch: a file `<faults>/<transactional id>.<point>` (point `after-send` or
 * `after-commit`) makes the next transaction of that producer fail once at that point; the
 * task that deletes the file is the one that fails.
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
            Properties props = new Properties();
            props.putAll(config);
            props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, id);
            props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
            props.put(ProducerConfig.ACKS_CONFIG, "all");
            TopicPartition source = new TopicPartition(sourceTopic, partition);
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(
                    props, new ByteArraySerializer(), new ByteArraySerializer())) {
                producer.initTransactions();
                long position = committed(source);
                long last = -1;
                long written = 0;
                long deadLettered = 0;
                long skipped = 0;
                boolean open = false;
                try {
                    for (Row row = first; row != null; row = rows.hasNext() ? rows.next() : null) {
                        int from = row.getInt(row.fieldIndex("source_partition"));
                        if (from != partition) {  // Spark's Kafka source splits, never merges
                            throw new IllegalStateException(
                                    "a task holds input partitions " + partition + " and " + from);
                        }
                        long offset = row.getLong(row.fieldIndex("source_offset"));
                        if (offset < position) {
                            skipped++;
                            continue;
                        }
                        if (!open) {
                            producer.beginTransaction();
                            open = true;
                        }
                        String topic = row.getString(row.fieldIndex("topic"));
                        producer.send(record(row, topic));
                        if (topic.equals(deadLetterTopic)) {
                            deadLettered++;
                        } else {
                            written++;
                        }
                        last = Math.max(last, offset);
                    }
                    if (open) {
                        String metadata = "batch " + batchId;
                        producer.sendOffsetsToTransaction(
                                Collections.singletonMap(
                                        source, new OffsetAndMetadata(last + 1, metadata)),
                                new ConsumerGroupMetadata(group));
                        fault(id, "after-send");
                        producer.commitTransaction();
                        open = false;
                        counts[TRANSACTIONS].add(1);
                        fault(id, "after-commit");
                    }
                } catch (ProducerFencedException e) {
                    throw e;  // a newer attempt owns the id, and aborted this transaction
                } catch (Exception e) {
                    if (open) {
                        try {
                            producer.abortTransaction();
                        } catch (Exception ignored) {
                            // the broker aborts it on the transaction's timeout, or the next
                            // attempt's initTransactions does
                        }
                    }
                    throw e;
                }
                counts[WRITTEN].add(written);
                counts[DEAD_LETTERED].add(deadLettered);
                counts[SKIPPED].add(skipped);
            }
        }

        /** The group's committed offset of the input partition: where this output is at in it. */
        private long committed(TopicPartition source) throws Exception {
            Properties props = new Properties();
            props.put("bootstrap.servers", config.get("bootstrap.servers"));
            try (Admin admin = Admin.create(props)) {
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
}

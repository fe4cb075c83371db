import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.Map;
import java.util.Set;

import org.apache.spark.SparkContext;
import org.apache.spark.scheduler.AccumulableInfo;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerExecutorMetricsUpdate;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.api.java.UDF2;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.util.LongAccumulator;

import scala.Tuple4;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Counts one output's events as its tasks run: in, matched, delivered, dead-lettered and the
 * delivery latency histogram.
 *
 * A query's observed metrics reach the driver only when its epoch ends, and under Real-time Mode
 * an epoch is the checkpoint interval (a minute, say). This meter is a UDF on the per-event path
 * (JVM code: no Python) that adds to named accumulators; executors send running tasks' values
 * with every heartbeat, and {@link Live} on the driver adds those to the finished tasks' values.
 * So the counts are seconds old whatever the interval.
 *
 * The column it makes is the output's filter condition, true or false, counted: every event it
 * sees as read, those it keeps as matched and each kept event's latency (now minus its ingest
 * time, in the histogram's buckets) at the moment the query handles it. A second column, {@link
 * #sent}, counts each projected record as delivered or, when it is too large to deliver,
 * dead-lettered.
 */
public final class RouterMeter implements UDF2<Boolean, Long, Boolean> {
    static final int IN = 0;
    static final int MATCHED = 1;
    static final int DELIVERED = 2;
    static final int DEAD_LETTERED = 3;
    static final int LATENCY_SUM_MS = 4;
    static final int BUCKETS = 5;  // then one count per latency bucket, the last one unbounded

    private final LongAccumulator[] counts;
    private final long[] boundsMs;
    // The driver's side only (never sent to executors): where the totals are, and whose.
    private final transient Live live;
    private final transient long[] ids;

    private RouterMeter(LongAccumulator[] counts, long[] boundsMs, Live live) {
        this.counts = counts;
        this.boundsMs = boundsMs;
        this.live = live;
        this.ids = new long[counts.length];
        for (int i = 0; i < counts.length; i++) {
            ids[i] = counts[i].id();
        }
    }

    /** A meter whose accumulators are named `<name>.<slot>` and registered with Spark. */
    public static RouterMeter create(SparkContext sc, String name, long[] boundsMs) {
        LongAccumulator[] counts = new LongAccumulator[BUCKETS + boundsMs.length + 1];
        Live live = Live.of(sc);
        for (int i = 0; i < counts.length; i++) {
            counts[i] = sc.longAccumulator(name + "." + i);
            live.track(counts[i].id());
        }
        return new RouterMeter(counts, boundsMs, live);
    }

    @Override
    public Boolean call(Boolean keep, Long timestamp) {
        counts[IN].add(1);
        if (keep == null || !keep) {
            return false;  // a filter's null (a missing field compared) keeps nothing, as in SQL
        }
        counts[MATCHED].add(1);
        if (timestamp != null) {
            long ms = System.currentTimeMillis() - timestamp;
            counts[LATENCY_SUM_MS].add(ms);
            int bucket = 0;
            while (bucket < boundsMs.length && ms > boundsMs[bucket]) {
                bucket++;
            }
            counts[BUCKETS + bucket].add(1);
        }
        return true;
    }

    /** The counted column: nondeterministic, so the optimizer neither moves nor repeats it. */
    public Column counted(Column keep, Column timestamp) {
        return functions.udf(this, DataTypes.BooleanType).asNondeterministic().apply(keep, timestamp);
    }

    /** `fits`, counted: true as delivered, else (the record goes to the dead-letter topic) as
     * dead-lettered. Nondeterministic too, so it runs once per record. */
    public Column sent(Column fits) {
        Sent sent = new Sent(counts[DELIVERED], counts[DEAD_LETTERED]);
        return functions.udf(sent, DataTypes.BooleanType).asNondeterministic().apply(fits);
    }

    /** `dead`, counted: true as dead-lettered (the stream's dead letters, which an output's
     * query writes beside its records: `router.plan.dead_letter_plan`). */
    public Column deadLettered(Column dead) {
        Flagged flagged = new Flagged(counts[DEAD_LETTERED]);
        return functions.udf(flagged, DataTypes.BooleanType).asNondeterministic().apply(dead);
    }

    private record Flagged(LongAccumulator count) implements UDF1<Boolean, Boolean> {
        @Override
        public Boolean call(Boolean flag) {
            boolean set = Boolean.TRUE.equals(flag);
            if (set) {
                count.add(1);
            }
            return set;
        }
    }

    private record Sent(LongAccumulator delivered, LongAccumulator deadLettered)
            implements UDF1<Boolean, Boolean> {
        @Override
        public Boolean call(Boolean fits) {
            boolean delivers = Boolean.TRUE.equals(fits);
            (delivers ? delivered : deadLettered).add(1);
            return delivers;
        }
    }

    /** Every count so far: in, matched, delivered, dead-lettered, latency sum (ms), then the
     * buckets (not cumulative). */
    public long[] totals() {
        return live.totals(ids);
    }

    /**
     * The driver's view of accumulators as tasks run: each finished task's final value, plus each
     * running task's value from its latest heartbeat. Both arrive on the listener bus, one event
     * at a time, so a task's partial is swapped for its final value in one step (the driver's
     * own accumulator is merged before the task's end reaches listeners, and read beside a
     * partial would count the task twice).
     */
    public static final class Live extends SparkListener {
        private static Live instance;
        private static final int ENDED_KEPT = 100_000;

        private final SparkContext sc;
        private final Set<Long> tracked = new HashSet<>();
        private final Map<Long, Long> finished = new HashMap<>();
        private final Map<Long, Map<Long, Long>> running = new HashMap<>();
        // A heartbeat can reach listeners after its task's end: its values are stale then.
        private final Set<Long> ended = new LinkedHashSet<>();

        private Live(SparkContext sc) {
            this.sc = sc;
        }

        /** The listener of this Spark application (a new one for a new SparkContext). */
        static synchronized Live of(SparkContext sc) {
            if (instance == null || instance.sc != sc) {
                instance = new Live(sc);
                sc.addSparkListener(instance);
            }
            return instance;
        }

        synchronized void track(long id) {
            tracked.add(id);
        }

        @Override
        public synchronized void onExecutorMetricsUpdate(SparkListenerExecutorMetricsUpdate update) {
            for (Tuple4<Object, Object, Object, scala.collection.immutable.Seq<AccumulableInfo>> task :
                    CollectionConverters.asJava(update.accumUpdates())) {
                long taskId = (Long) task._1();
                if (ended.contains(taskId)) {
                    continue;
                }
                for (AccumulableInfo info : CollectionConverters.asJava(task._4())) {
                    if (tracked.contains(info.id()) && info.update().getOrElse(() -> null) instanceof Long value) {
                        running.computeIfAbsent(taskId, k -> new HashMap<>()).put(info.id(), value);
                    }
                }
            }
        }

        @Override
        public synchronized void onTaskEnd(SparkListenerTaskEnd end) {
            long taskId = end.taskInfo().taskId();
            running.remove(taskId);
            ended.add(taskId);
            if (ended.size() > ENDED_KEPT) {
                ended.remove(ended.iterator().next());
            }
            // Spark lists a task's accumulators here only when it succeeded (a failed task's
            // events are read again by the attempt that replaces it).
            for (AccumulableInfo info : CollectionConverters.asJava(end.taskInfo().accumulables())) {
                if (tracked.contains(info.id()) && info.update().getOrElse(() -> null) instanceof Long value) {
                    finished.merge(info.id(), value, Long::sum);
                }
            }
        }

        synchronized long[] totals(long[] ids) {
            long[] totals = new long[ids.length];
            for (int i = 0; i < ids.length; i++) {
                totals[i] = finished.getOrDefault(ids[i], 0L);
                for (Map<Long, Long> partials : running.values()) {
                    totals[i] += partials.getOrDefault(ids[i], 0L);
                }
            }
            return totals;
        }
    }
}

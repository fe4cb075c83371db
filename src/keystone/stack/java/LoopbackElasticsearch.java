import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;

import org.codelibs.elasticsearch.runner.node.ClusterRunnerNode;
import org.elasticsearch.common.logging.LogConfigurator;
import org.elasticsearch.common.settings.Settings;
import org.elasticsearch.env.Environment;
import org.elasticsearch.node.Node;
import org.elasticsearch.plugins.Plugin;

/**
 * One real Elasticsearch 7.10 node (from Maven Central jars) on the addresses it is given:
 * {@code host httpPort transportPort homeDir}.
 *
 * codelibs' runner main picks its own ports (the first free one up to 9299) and overrides any
 * configured http.port; the stack must own its ports and fail when one is taken, so this starts
 * the runner's node class directly with exactly the stack's settings.
 */
public final class LoopbackElasticsearch {
    /** The modules a stock Elasticsearch distribution loads (what its runner loads too). */
    private static final String[] MODULES = {
        "org.elasticsearch.transport.Netty4Plugin",
        "org.elasticsearch.analysis.common.CommonAnalysisPlugin",
        "org.elasticsearch.index.mapper.MapperExtrasPlugin",
        "org.elasticsearch.painless.PainlessPlugin",
        "org.elasticsearch.script.expression.ExpressionPlugin",
        "org.elasticsearch.script.mustache.MustachePlugin",
        "org.elasticsearch.ingest.common.IngestCommonPlugin",
        "org.elasticsearch.search.aggregations.matrix.MatrixAggregationPlugin",
        "org.elasticsearch.index.reindex.ReindexPlugin",
        "org.elasticsearch.join.ParentJoinPlugin",
        "org.elasticsearch.percolator.PercolatorPlugin",
        "org.elasticsearch.index.rankeval.RankEvalPlugin",
    };

    public static void main(String[] args) throws Exception {
        Path home = Paths.get(args[3]).toAbsolutePath();
        Path config = Files.createDirectories(home.resolve("config"));
        Settings settings = Settings.builder()
                .put("cluster.name", "keystone")
                .put("node.name", "keystone-1")
                .put("path.home", home.toString())
                .put("path.data", home.resolve("data").toString())
                .put("path.logs", home.resolve("logs").toString())
                .put("network.host", args[0])
                .put("http.port", args[1])
                .put("transport.port", args[2])
                .put("discovery.type", "single-node")
                .build();
        LogConfigurator.registerErrorListener();
        LogConfigurator.configureWithoutConfig(settings);
        List<Class<? extends Plugin>> plugins = new ArrayList<>();
        for (String module : MODULES) {
            plugins.add(Class.forName(module).asSubclass(Plugin.class));
        }
        Node node = new ClusterRunnerNode(new Environment(settings, config), plugins);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                node.close();
            } catch (Exception e) {
                e.printStackTrace();
            }
        }));
        node.start();
        System.out.println("Keystone elasticsearch serving on " + args[0] + ":" + args[1]);
        new CountDownLatch(1).await();
    }
}

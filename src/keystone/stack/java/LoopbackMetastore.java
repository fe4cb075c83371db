import java.io.InputStream;
import java.net.InetSocketAddress;
import java.util.LinkedHashSet;
import java.util.Properties;
import java.util.Set;

import javax.jdo.PersistenceManager;
import javax.xml.parsers.DocumentBuilderFactory;

import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hadoop.hive.metastore.HiveMetaStore;
import org.apache.hadoop.hive.metastore.IHMSHandler;
import org.apache.hadoop.hive.metastore.ObjectStore;
import org.apache.hadoop.hive.metastore.TSetIpAddressProcessor;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.server.TThreadPoolServer;
import org.apache.thrift.transport.TSSLTransportFactory;
import org.apache.thrift.transport.TServerSocket;
import org.apache.thrift.transport.TTransportFactory;
import org.datanucleus.api.jdo.JDOPersistenceManager;
import org.datanucleus.store.schema.SchemaAwareStoreManager;
import org.w3c.dom.Element;
import org.w3c.dom.NodeList;

/**
 * The Hive metastore service (Hive 2.3, as shipped inside pyspark) on one chosen address.
 *
 * Two things differ from Hive 2.3's own HiveMetaStore main, both on purpose:
 * - it binds the address it is given ({@code host port [keystore]}); Hive's binds every
 *   interface and has no bind-host setting, and the embedded stack listens on loopback only.
 *   Given a PKCS12 key store (its password in KEYSTONE_METASTORE_KEYSTORE_PASSWORD, never an
 *   argument), it serves over TLS only;
 * - it creates the whole metastore schema before serving. Left to DataNucleus' lazy creation,
 *   two Spark applications creating their first tables at once deadlock in the database.
 * Everything else (database, warehouse) comes from hive-site.xml on the classpath.
 */
public final class LoopbackMetastore {
    public static void main(String[] args) throws Exception {
        InetSocketAddress address = new InetSocketAddress(args[0], Integer.parseInt(args[1]));
        HiveConf conf = new HiveConf(LoopbackMetastore.class);
        createSchema(conf);
        IHMSHandler handler = (IHMSHandler) HiveMetaStore.newRetryingHMSHandler("keystone metastore", conf, false);
        TServerSocket socket;
        if (args.length > 2) {
            TSSLTransportFactory.TSSLTransportParameters tls = new TSSLTransportFactory.TSSLTransportParameters();
            tls.setKeyStore(args[2], System.getenv("KEYSTONE_METASTORE_KEYSTORE_PASSWORD"), null, "PKCS12");
            socket = TSSLTransportFactory.getServerSocket(address.getPort(), 0, address.getAddress(), tls);
        } else {
            socket = new TServerSocket(address);
        }
        TThreadPoolServer.Args server = new TThreadPoolServer.Args(socket)
                .processor(new TSetIpAddressProcessor<>(handler))
                .transportFactory(new TTransportFactory())
                .protocolFactory(new TBinaryProtocol.Factory())
                .minWorkerThreads(conf.getIntVar(HiveConf.ConfVars.METASTORESERVERMINTHREADS))
                .maxWorkerThreads(conf.getIntVar(HiveConf.ConfVars.METASTORESERVERMAXTHREADS));
        System.out.println("Keystone metastore serving on " + address + (args.length > 2 ? " over TLS" : ""));
        new TThreadPoolServer(server).serve();
    }

    /** Creates (idempotently) the tables of every persistent class that package.jdo maps. */
    private static void createSchema(HiveConf conf) throws Exception {
        Set<String> classes = new LinkedHashSet<>();
        try (InputStream jdo = ObjectStore.class.getClassLoader().getResourceAsStream("package.jdo")) {
            DocumentBuilderFactory factory = DocumentBuilderFactory.newInstance();
            factory.setFeature("http://apache.org/xml/features/nonvalidating/load-external-dtd", false);
            NodeList packages = factory.newDocumentBuilder().parse(jdo).getElementsByTagName("package");
            for (int p = 0; p < packages.getLength(); p++) {
                Element pkg = (Element) packages.item(p);
                NodeList members = pkg.getElementsByTagName("class");
                for (int c = 0; c < members.getLength(); c++) {
                    classes.add(pkg.getAttribute("name") + "." + ((Element) members.item(c)).getAttribute("name"));
                }
            }
        }
        ObjectStore store = new ObjectStore();
        store.setConf(conf);
        PersistenceManager pm = store.getPersistenceManager();
        SchemaAwareStoreManager manager =
                (SchemaAwareStoreManager) ((JDOPersistenceManager) pm).getExecutionContext().getStoreManager();
        manager.createSchemaForClasses(classes, new Properties());
        store.shutdown();
        System.out.println("Keystone metastore schema ready: " + classes.size() + " classes");
    }
}

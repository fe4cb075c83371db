import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermissions;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FsConstants;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.local.LocalConfigKeys;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system without a process forked per file.
 *
 * Without Hadoop's native library (not on Maven Central), RawLocalFileSystem sets each new file's
 * permissions by running {@code chmod} and asks whether a path is a symbolic link by running
 * {@code readlink}: a fork of the whole JVM each time, 10-40 ms here. A streaming query writes
 * its offset and commit logs through it at every checkpoint (a chmod and four readlinks a file),
 * which is most of the pause a Real-time Mode query takes at each epoch boundary. Here both go
 * through java.nio instead; everything else is Hadoop's own code.
 *
 * {@code spark.hadoop.fs.file.impl} names this class (the FileSystem API: Parquet, Hive tables);
 * {@code spark.hadoop.fs.AbstractFileSystem.file.impl} names {@link Fs} (the FileContext API:
 * Spark's checkpoint files).
 */
public class ForklessLocalFileSystem extends LocalFileSystem {
    public ForklessLocalFileSystem() {
        super(new Raw());
    }

    public static class Raw extends RawLocalFileSystem {
        @Override
        public void setPermission(Path p, FsPermission permission) throws IOException {
            if (permission.getStickyBit()) {
                super.setPermission(p, permission);  // java.nio cannot set it
                return;
            }
            Files.setPosixFilePermissions(
                    pathToFile(p).toPath(), PosixFilePermissions.fromString(permission.toString()));
        }

        @Override
        public FileStatus getFileLinkStatus(Path f) throws IOException {
            if (Files.isSymbolicLink(pathToFile(f).toPath())) {
                return super.getFileLinkStatus(f);
            }
            return getFileStatus(f);
        }
    }

    /** The same for FileContext, in place of Hadoop's LocalFs (ChecksumFs over RawLocalFs). */
    public static class Fs extends ChecksumFs {
        public Fs(URI uri, Configuration conf) throws IOException, URISyntaxException {
            super(new RawFs(uri, conf));
        }
    }

    /** Hadoop's RawLocalFs (whose constructors are not public) over {@link Raw}. */
    public static class RawFs extends DelegateToFileSystem {
        public RawFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
            super(uri, new Raw(), conf, FsConstants.LOCAL_FS_URI.getScheme(), false);
        }

        @Override
        public int getUriDefaultPort() {
            return -1;
        }

        @Override
        public FsServerDefaults getServerDefaults(Path f) throws IOException {
            return LocalConfigKeys.getServerDefaults();
        }

        @Override
        @Deprecated
        public FsServerDefaults getServerDefaults() throws IOException {
            return LocalConfigKeys.getServerDefaults();
        }

        @Override
        public boolean isValidName(String src) {
            return true;
        }
    }
}

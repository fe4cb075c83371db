import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * Kafka's storage formatting tool ({@code kafka.tools.StorageTool format}), given its
 * {@code --add-scram} users on its standard input, a line each, not on its command line: they
 * hold passwords, and a process' arguments are anyone's to read ({@code ps}, /proc).
 */
public final class KafkaStorageFormat {
    public static void main(String[] args) throws Exception {
        List<String> all = new ArrayList<>(List.of(args));
        BufferedReader in = new BufferedReader(
                new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            if (!line.isBlank()) {
                all.add("--add-scram");
                all.add(line.strip());
            }
        }
        kafka.tools.StorageTool.main(all.toArray(new String[0]));
    }
}

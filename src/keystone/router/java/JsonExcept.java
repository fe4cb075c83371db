import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.Serializable;
import java.util.HashMap;
import java.util.Map;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;

import org.apache.spark.sql.Column;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.classic.ExpressionUtils;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * An event's JSON object less the values at some field paths: `* except a.b, c` (and the
 * top-level names a projection sets itself), in one streaming pass over its text.
 *
 * Every member it keeps is copied as the event wrote it, byte for byte (its numbers' text, its
 * escapes, the spacing inside its values); only the spacing between members changes. A path
 * goes through objects only; one through anything else leaves it as it is. A repeated name is
 * handled at each of its places. Null when the text is not a JSON object (the router has made
 * such an event a dead letter already).
 */
public final class JsonExcept extends TextArgumentExpression {
    private static final JsonFactory JSON = JsonFactory.builder()
        .disable(JsonFactory.Feature.CHARSET_DETECTION)
        .streamReadConstraints(StreamReadConstraints.builder()
            .maxNumberLength(Integer.MAX_VALUE)
            .maxNameLength(Integer.MAX_VALUE)
            .maxStringLength(Integer.MAX_VALUE)
            .build())
        .build();

    private final Node root;

    /** A name on the paths: left out whole (`drop`), or an object some of whose names are. */
    static final class Node implements Serializable {
        boolean drop;
        final Map<String, Node> children = new HashMap<>();
    }

    /** `paths`: dotted, comma-separated. */
    public JsonExcept(Expression child, String paths) {
        super(child, paths);
        this.root = new Node();
        for (String path : paths.isEmpty() ? new String[0] : paths.split(",")) {
            Node node = root;
            for (String name : path.split("\\.")) {
                node = node.children.computeIfAbsent(name, n -> new Node());
            }
            node.drop = true;
        }
    }

    /** The column of `value` (JSON text) less the values at `paths`: dotted, comma-separated. */
    public static Column column(Column value, String paths) {
        return ExpressionUtils.column(new JsonExcept(ExpressionUtils.expression(value), paths));
    }

    @Override
    public Object apply(Object input) {
        byte[] bytes = ((UTF8String) input).getBytes();
        ByteArrayOutputStream out = new ByteArrayOutputStream(bytes.length);
        try (JsonParser parser = JSON.createParser(bytes)) {
            if (parser.nextToken() != JsonToken.START_OBJECT) {
                return null;
            }
            copy(parser, root, bytes, out);
        } catch (IOException e) {
            return null;
        }
        return UTF8String.fromBytes(out.toByteArray());
    }

    /** The object the parser is at the start of, less the node's paths, onto `out`. */
    private static void copy(JsonParser parser, Node node, byte[] bytes, ByteArrayOutputStream out)
            throws IOException {
        out.write('{');
        boolean first = true;
        while (parser.nextToken() == JsonToken.FIELD_NAME) {
            int start = (int) parser.currentTokenLocation().getByteOffset();
            Node inner = node.children.get(parser.currentName());
            JsonToken token = parser.nextToken();
            if (inner != null && inner.drop) {
                parser.skipChildren();
                continue;
            }
            if (!first) {
                out.write(',');
            }
            first = false;
            if (inner != null && token == JsonToken.START_OBJECT) {
                int value = (int) parser.currentTokenLocation().getByteOffset();
                out.write(bytes, start, value - start);  // the name, its colon
                copy(parser, inner, bytes, out);
                continue;
            }
            parser.skipChildren();
            parser.finishToken();  // a string's end is found only when it is read
            int end = (int) parser.currentLocation().getByteOffset();
            out.write(bytes, start, end - start);
        }
        out.write('}');
    }

    @Override
    public DataType dataType() {
        return DataTypes.StringType;
    }

    @Override
    protected Expression withChild(Expression child) {
        return new JsonExcept(child, argument);
    }
}

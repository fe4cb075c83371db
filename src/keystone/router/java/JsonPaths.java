import java.io.IOException;
import java.io.Serializable;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;

import org.apache.spark.sql.Column;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.analysis.TypeCheckResult;
import org.apache.spark.sql.classic.ExpressionUtils;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The values at an event's field paths, read in one streaming pass over its JSON bytes.
 *
 * The result is a struct with a field per dotted path, each a struct of `kind` (string, number,
 * boolean, null, object, array or missing), `json` (the value's own text in the event, null when
 * missing) and `string` (a string's decoded value, else null); or null when the bytes are not a
 * JSON object in UTF-8 (strict JSON and strict UTF-8, no byte order mark: what Python's json
 * module reads from text it decoded as UTF-8), or a string read at a path holds an escaped lone
 * surrogate (no Spark string can hold it as Python does). Values at no path are
 * skipped, never built: this is what lets the router read exactly what its filters and
 * projections use, each value's JSON type and text kept, for the cost of a tokenizer pass. A
 * repeated name counts once, its last value, as Python's json module reads it. Text after the
 * object is ignored, as Spark's own JSON readers ignore it.
 *
 * Lenient (the paths given after a leading `?`), a string with a lone surrogate leaves only its
 * own path unreadable: kind `unreadable`, its text in `json`, the other paths read. A query that
 * reads some paths for itself and checks others for the stream (an output writing the stream's
 * dead letters too) tells the two apart in one pass.
 */
public final class JsonPaths extends TextArgumentExpression {
    static final UTF8String STRING = UTF8String.fromString("string");
    static final UTF8String NUMBER = UTF8String.fromString("number");
    static final UTF8String BOOLEAN = UTF8String.fromString("boolean");
    static final UTF8String NULL = UTF8String.fromString("null");
    static final UTF8String OBJECT = UTF8String.fromString("object");
    static final UTF8String ARRAY = UTF8String.fromString("array");
    static final UTF8String MISSING = UTF8String.fromString("missing");
    static final UTF8String UNREADABLE_KIND = UTF8String.fromString("unreadable");
    static final String LENIENT = "?";
    static final StructType LEAF = new StructType(new StructField[] {
        DataTypes.createStructField("kind", DataTypes.StringType, false),
        DataTypes.createStructField("json", DataTypes.StringType, true),
        DataTypes.createStructField("string", DataTypes.StringType, true),
    });
    // Read only, so one row serves every missing value.
    private static final GenericInternalRow MISSING_LEAF =
        new GenericInternalRow(new Object[] {MISSING, null, null});
    // UTF-8 only: Jackson's detection would read UTF-16 or skip a BOM, and lose byte offsets.
    // No limits of its own: an event's size bounds it, and Python's json has none on these.
    private static final JsonFactory JSON = JsonFactory.builder()
        .disable(JsonFactory.Feature.CHARSET_DETECTION)
        .streamReadConstraints(StreamReadConstraints.builder()
            .maxNumberLength(Integer.MAX_VALUE)
            .maxNameLength(Integer.MAX_VALUE)
            .maxStringLength(Integer.MAX_VALUE)
            .build())
        .build();
    // A string read at a path that holds a lone surrogate; fails the event if it is the last.
    private static final GenericInternalRow UNREADABLE = new GenericInternalRow(0);

    private final Node root;
    private final StructType type;
    private final boolean lenient;

    /** A name's place in the tree of paths: the leaf it fills, if a path ends here, and the
     * names read inside it. */
    static final class Node implements Serializable {
        int leaf = -1;
        final Map<String, Node> children = new HashMap<>();
        final List<Integer> under = new ArrayList<>();  // every leaf at or below this name
    }

    /** `paths`: dotted, comma-separated; after a `?`, read leniently. */
    public JsonPaths(Expression child, String paths) {
        super(child, paths);
        this.lenient = paths.startsWith(LENIENT);
        paths = paths.substring(lenient ? LENIENT.length() : 0);
        this.root = new Node();
        List<StructField> fields = new ArrayList<>();
        for (String path : paths.isEmpty() ? new String[0] : paths.split(",")) {
            Node node = root;
            for (String name : path.split("\\.")) {
                node = node.children.computeIfAbsent(name, n -> new Node());
                node.under.add(fields.size());
            }
            node.leaf = fields.size();
            fields.add(DataTypes.createStructField(path, LEAF, false));
        }
        this.type = new StructType(fields.toArray(new StructField[0]));
    }

    /** The column of `value` (the event's bytes) read at `paths`: dotted, comma-separated. */
    public static Column column(Column value, String paths) {
        return ExpressionUtils.column(new JsonPaths(ExpressionUtils.expression(value), paths));
    }

    @Override
    public Object apply(Object input) {
        byte[] bytes = (byte[]) input;
        Object[] leaves = new Object[type.size()];
        Arrays.fill(leaves, MISSING_LEAF);
        try (JsonParser parser = JSON.createParser(bytes)) {
            if (parser.nextToken() != JsonToken.START_OBJECT || !utf8(bytes)) {
                return null;
            }
            read(parser, root, leaves, bytes, lenient);
        } catch (IOException e) {
            return null;
        }
        for (Object leaf : leaves) {
            if (leaf == UNREADABLE) {
                return null;
            }
        }
        return new GenericInternalRow(leaves);
    }

    /** The object the parser is at the start of, its values at the node's paths into leaves. */
    private static void read(
            JsonParser parser, Node node, Object[] leaves, byte[] bytes, boolean lenient)
            throws IOException {
        while (parser.nextToken() == JsonToken.FIELD_NAME) {
            Node child = node.children.get(parser.currentName());
            JsonToken token = parser.nextToken();
            if (child == null) {
                parser.skipChildren();
                continue;
            }
            for (int leaf : child.under) {  // a repeated name: only its last value counts
                leaves[leaf] = MISSING_LEAF;
            }
            boolean inside = token == JsonToken.START_OBJECT && !child.children.isEmpty();
            if (child.leaf < 0 && !inside) {
                parser.skipChildren();  // paths through what is not an object: missing
                continue;
            }
            int start = (int) parser.currentTokenLocation().getByteOffset();
            UTF8String kind;
            UTF8String string = null;
            if (inside) {
                read(parser, child, leaves, bytes, lenient);
                kind = OBJECT;
            } else if (token == JsonToken.VALUE_STRING) {
                string = decoded(parser, bytes, start);
                if (string == null && !lenient) {
                    leaves[child.leaf] = UNREADABLE;
                    continue;
                }
                kind = string == null ? UNREADABLE_KIND : STRING;
            } else {
                parser.skipChildren();
                kind = kind(token);
            }
            if (child.leaf >= 0) {
                int end = (int) parser.currentLocation().getByteOffset();
                UTF8String json = UTF8String.fromBytes(bytes, start, end - start);
                leaves[child.leaf] = new GenericInternalRow(new Object[] {kind, json, string});
            }
        }
    }

    /** The string the parser is at, decoded (its bytes between the quotes when it has no
     * escapes), or null when it holds a lone surrogate. */
    private static UTF8String decoded(JsonParser parser, byte[] bytes, int start)
            throws IOException {
        parser.finishToken();
        int end = (int) parser.currentLocation().getByteOffset();
        for (int i = start + 1; i < end - 1; i++) {
            if (bytes[i] == '\\') {
                String text = parser.getText();
                return loneSurrogate(text) ? null : UTF8String.fromString(text);
            }
        }
        return UTF8String.fromBytes(bytes, start + 1, end - start - 2);
    }

    private static boolean loneSurrogate(String text) {
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (Character.isHighSurrogate(c) && i + 1 < text.length()
                    && Character.isLowSurrogate(text.charAt(i + 1))) {
                i++;
            } else if (Character.isSurrogate(c)) {
                return true;
            }
        }
        return false;
    }

    /** Whether the bytes are UTF-8 as Python decodes it: Jackson lets overlong forms, encoded
     * surrogates and code points past U+10FFFF through. Only text beyond ASCII is decoded. */
    private static boolean utf8(byte[] bytes) {
        for (byte b : bytes) {
            if (b < 0) {
                try {
                    StandardCharsets.UTF_8.newDecoder().decode(ByteBuffer.wrap(bytes));
                    return true;
                } catch (CharacterCodingException e) {
                    return false;
                }
            }
        }
        return true;
    }

    private static UTF8String kind(JsonToken token) {
        switch (token) {
            case START_OBJECT: return OBJECT;
            case START_ARRAY: return ARRAY;
            case VALUE_TRUE:
            case VALUE_FALSE: return BOOLEAN;
            case VALUE_NULL: return NULL;
            default: return NUMBER;
        }
    }

    @Override
    public TypeCheckResult checkInputDataTypes() {
        return reads(BinaryType.class, "bytes (BINARY)");
    }

    @Override
    public DataType dataType() {
        return type;
    }

    @Override
    protected Expression withChild(Expression child) {
        return new JsonPaths(child, argument);
    }
}

import java.math.BigDecimal;
import java.math.MathContext;
import java.math.RoundingMode;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.HashMap;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;


import org.apache.spark.sql.Column;
import org.apache.spark.sql.catalyst.analysis.TypeCheckResult;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.classic.ExpressionUtils;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.unsafe.types.UTF8String;

import scala.collection.immutable.IndexedSeq;

/**
 * The routing language's functions that Spark has no column function for, each as
 * router/lang/functions.py (the reference) defines it, each reading its argument once. Null
 * in, null out.
 *
 * - `repr`: a double's text as Python's repr writes it (the shortest decimal that reads back as
 *   the same double: `1.5`, `3.0`, `1e+16`, `1e-05`), null when it is not finite. Java 17's
 *   Double.toString is neither shortest in every case nor in that form.
 * - `numtext`: a JSON number's text as the language writes it (an integer's digits, else the
 *   double's shortest form).
 * - `quote`: a string as a JSON string.
 * - `finite`: a double, null when it is not finite (an overflow, 0/0).
 * - `hash`: HMAC-SHA256 of a string's UTF-8 under the stream's key, in lower-case hex. The key
 *   never shows in a plan: the expression prints as `hash(<child>)`.
 * - `case`: a string with each character mapped by a table (`lower`, `upper`).
 * - `mask`: a string with all but its last `keep` code points as '*' (all of them when it has
 *   no more).
 * - `iso8601`: epoch milliseconds of a time written `yyyy-mm-ddThh:mm:ss[.fraction](Z|+hh:mm)`,
 *   the fraction read to the millisecond; null when it is not one, or names no such day or time.
 * - `millis`: the floor of a double of epoch milliseconds, null outside years 1 to 9999.
 * - `date`: the UTC date (yyyy-mm-dd) of a double of epoch milliseconds, null outside years 1 to
 *   9999.
 */
public final class LangFunction extends CalledExpression {
    private static final Pattern ISO8601 = Pattern.compile(
        "([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\\.([0-9]{1,9}))?"
        + "(?:(Z)|([+-])([0-9]{2}):([0-9]{2}))");

    // op: what it reads, what it gives
    private static final Map<String, DataType[]> TYPES = Map.of(
        "repr", new DataType[] {DataTypes.DoubleType, DataTypes.StringType},
        "numtext", new DataType[] {DataTypes.StringType, DataTypes.StringType},
        "case", new DataType[] {DataTypes.StringType, DataTypes.StringType},
        "quote", new DataType[] {DataTypes.StringType, DataTypes.StringType},
        "finite", new DataType[] {DataTypes.DoubleType, DataTypes.DoubleType},
        "hash", new DataType[] {DataTypes.StringType, DataTypes.StringType},
        "mask", new DataType[] {DataTypes.StringType, DataTypes.StringType},
        "iso8601", new DataType[] {DataTypes.StringType, DataTypes.LongType},
        "millis", new DataType[] {DataTypes.DoubleType, DataTypes.LongType},
        "date", new DataType[] {DataTypes.DoubleType, DataTypes.StringType});
    // The days from 1970-01-01 of 0001-01-01 and 9999-12-31 (functions.FIRST_DAY, LAST_DAY).
    private static final long FIRST_DAY = -719_162;
    private static final long LAST_DAY = 2_932_896;
    private static final double DAY_MS = 86_400_000.0;

    private final String op;
    // `hash`: the stream's key; `case`: the case mapping, UTF-8, each entry a character, \u0001,
    // what it maps to, \u0000.
    private final byte[] data;
    private final int keep;  // `mask` only
    // The padded keys' digest states, made by the first value: one per deserialised copy of
    // the expression, so per task (a digest is not shared between threads).
    private transient MessageDigest inner;
    private transient MessageDigest outer;
    private transient Map<Integer, String> cases;
    private static final byte[] HEX = "0123456789abcdef".getBytes(StandardCharsets.US_ASCII);

    public LangFunction(String op, Expression child, byte[] data, int keep) {
        super(child);
        if (!TYPES.containsKey(op)) {
            throw new IllegalArgumentException("no language function " + op);
        }
        this.op = op;
        this.data = data;
        this.keep = keep;
    }

    /** The column of `op` applied to `value`; `data`: the stream's key for `hash`, the mapping
     * for `case`; `keep`: for `mask`. */
    public static Column column(String op, Column value, byte[] data, int keep) {
        return ExpressionUtils.column(
            new LangFunction(op, ExpressionUtils.expression(value), data, keep));
    }

    @Override
    public Object apply(Object value) {
        switch (op) {
            case "repr": return string(repr((Double) value));
            case "quote": return UTF8String.fromString(quote(value.toString()));
            case "finite": return Double.isFinite((Double) value) ? value : null;
            case "hash": return hash(((UTF8String) value).getBytes());
            case "numtext": return string(numberText(value.toString()));
            case "mask": return UTF8String.fromString(mask(value.toString(), keep));
            case "case": return UTF8String.fromString(mapCase(value.toString()));
            case "iso8601": return iso8601(value.toString());
            case "millis": return day((Double) value) == null ? null : (long) Math.floor((Double) value);
            default: {
                Long day = day((Double) value);
                return day == null ? null : UTF8String.fromString(LocalDate.ofEpochDay(day).toString());
            }
        }
    }

    private static UTF8String string(String text) {
        return text == null ? null : UTF8String.fromString(text);
    }

    /** The day (from 1970-01-01) of epoch milliseconds, if within years 1 to 9999. */
    static Long day(double ms) {
        double days = ms / DAY_MS;  // NaN and the infinities fail both tests
        return days >= FIRST_DAY && days < LAST_DAY + 1 ? (long) Math.floor(days) : null;
    }

    /** Each character mapped as the table says (lower or upper case, as the Python that
     * compiled the plan maps it: both backends use one table), the others kept. */
    private String mapCase(String text) {
        if (cases == null) {
            Map<Integer, String> table = new HashMap<>();
            for (String entry : new String(data, StandardCharsets.UTF_8).split("\u0000")) {
                int at = entry.indexOf('\u0001');
                if (at > 0) {
                    table.put(entry.codePointAt(0), entry.substring(at + 1));
                }
            }
            cases = table;
        }
        StringBuilder out = new StringBuilder(text.length());
        text.codePoints().forEach(c -> {
            String mapped = cases.get(c);
            if (mapped == null) {
                out.appendCodePoint(c);
            } else {
                out.append(mapped);
            }
        });
        return out.toString();
    }

    /** All but the last `keep` code points as '*'; all of them when there are no more. */
    static String mask(String text, int keep) {
        int size = text.codePointCount(0, text.length());
        int hidden = size > keep ? size - keep : size;
        return "*".repeat(hidden) + text.substring(text.offsetByCodePoints(0, hidden));
    }

    /** A string as a JSON string: quotes, backslashes and control characters escaped. */
    static String quote(String text) {
        StringBuilder out = new StringBuilder(text.length() + 2).append('"');
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }

    /** Python's repr of a double; null for an infinite one or NaN. */
    public static String repr(double d) {
        if (Double.isNaN(d) || Double.isInfinite(d)) {
            return null;
        }
        if (d == 0) {
            return 1 / d < 0 ? "-0.0" : "0.0";
        }
        BigDecimal exact = new BigDecimal(d);
        BigDecimal shortest = null;
        // The decimals of p digits either side of d: the shortest p for which one reads back
        // as d, the closer of the two if both do (round half even on a tie).
        for (int p = 1; shortest == null; p++) {
            BigDecimal below = exact.round(new MathContext(p, RoundingMode.FLOOR));
            BigDecimal above = exact.round(new MathContext(p, RoundingMode.CEILING));
            boolean belowReads = below.doubleValue() == d;
            boolean aboveReads = above.doubleValue() == d;
            if (belowReads && aboveReads) {
                shortest = exact.round(new MathContext(p, RoundingMode.HALF_EVEN));
            } else if (belowReads) {
                shortest = below;
            } else if (aboveReads) {
                shortest = above;
            }
        }
        BigDecimal stripped = shortest.stripTrailingZeros();
        String digits = stripped.unscaledValue().abs().toString();
        int exponent = digits.length() - 1 - stripped.scale();  // of the first digit
        StringBuilder out = new StringBuilder(d < 0 ? "-" : "");
        if (exponent < -4 || exponent >= 16) {
            out.append(digits.charAt(0));
            if (digits.length() > 1) {
                out.append('.').append(digits, 1, digits.length());
            }
            out.append('e').append(exponent < 0 ? '-' : '+');
            int magnitude = Math.abs(exponent);
            out.append(magnitude < 10 ? "0" : "").append(magnitude);
        } else if (exponent < 0) {
            out.append("0.").append("0".repeat(-exponent - 1)).append(digits);
        } else if (digits.length() <= exponent + 1) {
            out.append(digits).append("0".repeat(exponent + 1 - digits.length())).append(".0");
        } else {
            out.append(digits, 0, exponent + 1).append('.').append(digits, exponent + 1,
                digits.length());
        }
        return out.toString();
    }

    /** HMAC-SHA256 of the bytes under the key, in lower-case hex: SHA-256 of the outer padded
     * key and SHA-256 of the inner padded key and the text. The padded keys' digest states are
     * made once and copied for each value (half of HMAC's work is hashing them). */
    private UTF8String hash(byte[] text) {
        try {
            if (inner == null) {
                byte[] k = data.length > 64 ? MessageDigest.getInstance("SHA-256").digest(data) : data;
                byte[] ipad = new byte[64];
                byte[] opad = new byte[64];
                for (int i = 0; i < 64; i++) {
                    byte b = i < k.length ? k[i] : 0;
                    ipad[i] = (byte) (b ^ 0x36);
                    opad[i] = (byte) (b ^ 0x5c);
                }
                MessageDigest padded = MessageDigest.getInstance("SHA-256");
                padded.update(opad);
                outer = padded;
                padded = MessageDigest.getInstance("SHA-256");
                padded.update(ipad);
                inner = padded;  // last: whoever sees it set sees both complete
            }
            MessageDigest in = (MessageDigest) inner.clone();
            in.update(text);
            MessageDigest out = (MessageDigest) outer.clone();
            out.update(in.digest());
            byte[] digest = out.digest();
            byte[] hex = new byte[digest.length * 2];
            for (int i = 0; i < digest.length; i++) {
                hex[2 * i] = HEX[(digest[i] >> 4) & 0xf];
                hex[2 * i + 1] = HEX[digest[i] & 0xf];
            }
            return UTF8String.fromBytes(hex);
        } catch (GeneralSecurityException | CloneNotSupportedException e) {
            throw new IllegalStateException("SHA-256 is not available", e);
        }
    }

    /** A JSON number's text as the language writes it: an integer's digits as written (`-0` is
     * `0`, as Python reads it), else the double's shortest form; null when it is infinite. */
    static String numberText(String raw) {
        int start = raw.startsWith("-") ? 1 : 0;
        boolean integer = raw.length() > start;
        for (int i = start; i < raw.length() && integer; i++) {
            integer = Character.isDigit(raw.charAt(i)) && raw.charAt(i) < 128;
        }
        if (integer) {
            return raw.equals("-0") ? "0" : raw;
        }
        try {
            return repr(Double.parseDouble(raw));
        } catch (NumberFormatException e) {
            return null;  // not a JSON number's text: none reaches here, and none fails an event
        }
    }

    /** Epoch milliseconds of an ISO-8601 time, or null. */
    public static Long iso8601(String text) {
        Matcher found = ISO8601.matcher(text);
        if (!found.matches()) {
            return null;
        }
        int[] parts = new int[6];
        for (int i = 0; i < 6; i++) {
            parts[i] = Integer.parseInt(found.group(i + 1));
        }
        String fraction = found.group(7) == null ? "" : found.group(7);
        int millis = Integer.parseInt((fraction + "000").substring(0, 3));
        int offset = 0;
        if (found.group(8) == null) {
            int hours = Integer.parseInt(found.group(10));
            int minutes = Integer.parseInt(found.group(11));
            if (hours > 23 || minutes > 59) {
                return null;
            }
            offset = (hours * 60 + minutes) * (found.group(9).equals("+") ? 1 : -1);
        }
        if (parts[0] < 1) {
            return null;  // year 0: Python's dates begin at year 1
        }
        LocalDateTime moment;
        try {
            moment = LocalDateTime.of(parts[0], parts[1], parts[2], parts[3], parts[4], parts[5]);
        } catch (java.time.DateTimeException e) {
            return null;  // no such day or time
        }
        long seconds = moment.toEpochSecond(ZoneOffset.UTC) - offset * 60L;
        return seconds * 1000 + millis;
    }

    @Override
    public TypeCheckResult checkInputDataTypes() {
        DataType wanted = TYPES.get(op)[0];
        if (child.dataType().sameType(wanted)) {
            return TypeCheckResult.TypeCheckSuccess$.MODULE$;
        }
        return new TypeCheckResult.TypeCheckFailure(op + " reads " + wanted.simpleString()
            + ", not " + child.dataType().simpleString());
    }

    @Override
    public DataType dataType() {
        return TYPES.get(op)[1];
    }

    @Override
    public String prettyName() {
        return op;
    }

    @Override
    public String toString() {
        return op + "(" + child + ")";
    }

    @Override
    public Expression withNewChildrenInternal(IndexedSeq<Expression> children) {
        return new LangFunction(op, children.head(), data, keep);
    }

    @Override
    public int productArity() {
        return 3;
    }

    @Override
    public Object productElement(int n) {
        return n == 0 ? op : n == 1 ? child : keep;  // not the data: a plan prints these
    }

    @Override
    public boolean canEqual(Object other) {
        return other instanceof LangFunction;
    }

    @Override
    public boolean equals(Object other) {
        return other instanceof LangFunction that && op.equals(that.op) && child.equals(that.child)
            && java.util.Arrays.equals(data, that.data) && keep == that.keep;
    }

    @Override
    public int hashCode() {
        return 31 * (31 * (31 * op.hashCode() + child.hashCode()) + java.util.Arrays.hashCode(data))
            + keep;
    }
}

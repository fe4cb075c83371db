import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.Column;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.classic.ExpressionUtils;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A string's `like` a pattern, in O(len(text) * len(pattern)) code point comparisons: the
 * algorithm of router/lang/like.py (the reference), for the router.
 *
 * Spark's own LIKE compiles to a java.util.regex pattern, which backtracks: `%a%a%a%a%b` over a
 * long run of `a`s takes time growing as a power of its length. Here the pattern is split on `%`
 * into segments of literal code points and `_` (any one code point); the first must match at
 * the start, the last at the end, each one between at its leftmost place after the one before,
 * and nothing backtracks. Characters are code points, as in Python: `_` matches one astral
 * character, not half of it. The pattern is split once, where the expression is built, and
 * travels with it to the executors. Null in, null out.
 */
public final class LikeMatcher extends TextArgumentExpression {
    private static final int ANY = -1;  // `_` in a segment

    private final int[][] segments;

    /** `pattern`: as written. */
    public LikeMatcher(Expression child, String pattern) {
        super(child, pattern);
        this.segments = segments(pattern);
    }

    /** The column of whether `value` (a string) is like `pattern`. */
    public static Column column(Column value, String pattern) {
        return ExpressionUtils.column(new LikeMatcher(ExpressionUtils.expression(value), pattern));
    }

    /** The pattern split on `%`; a backslash escapes %, _ or a backslash (the parser allows no
     * other). */
    static int[][] segments(String pattern) {
        List<int[]> parts = new ArrayList<>();
        List<Integer> current = new ArrayList<>();
        int[] chars = pattern.codePoints().toArray();
        for (int i = 0; i < chars.length; i++) {
            if (chars[i] == '\\') {
                current.add(chars[++i]);
            } else if (chars[i] == '%') {
                parts.add(current.stream().mapToInt(Integer::intValue).toArray());
                current.clear();
            } else {
                current.add(chars[i] == '_' ? ANY : chars[i]);
            }
        }
        parts.add(current.stream().mapToInt(Integer::intValue).toArray());
        return parts.toArray(new int[0][]);
    }

    /** How many code points matching `text` against `pattern` compares (`steps`, the cost
     * bound's measure, for tests). */
    public static long comparisons(String pattern, String text) {
        long[] steps = {0};
        matches(segments(pattern), text.codePoints().toArray(), steps);
        return steps[0];
    }

    /** Whether the text's code points match the segments; `steps` (when not null) counts the
     * code points compared. */
    static boolean matches(int[][] segments, int[] text, long[] steps) {
        int[] first = segments[0];
        int[] last = segments[segments.length - 1];
        if (segments.length == 1) {  // no `%`: the whole text, code point by code point
            return text.length == first.length && fits(first, text, 0, steps);
        }
        int end = text.length - last.length;  // where the last segment must start
        if (first.length > end || !fits(first, text, 0, steps) || !fits(last, text, end, steps)) {
            return false;
        }
        int at = first.length;
        for (int s = 1; s < segments.length - 1; s++) {
            int[] segment = segments[s];
            while (at + segment.length <= end && !fits(segment, text, at, steps)) {
                at++;
            }
            if (at + segment.length > end) {
                return false;
            }
            at += segment.length;
        }
        return true;
    }

    private static boolean fits(int[] segment, int[] text, int at, long[] steps) {
        for (int i = 0; i < segment.length; i++) {
            if (steps != null) {
                steps[0]++;
            }
            if (segment[i] != ANY && text[at + i] != segment[i]) {
                return false;
            }
        }
        return true;
    }

    @Override
    public Object apply(Object input) {
        return matches(segments, ((UTF8String) input).toString().codePoints().toArray(), null);
    }

    @Override
    public DataType dataType() {
        return DataTypes.BooleanType;
    }

    @Override
    protected Expression withChild(Expression child) {
        return new LikeMatcher(child, argument);
    }
}

import org.apache.spark.sql.catalyst.analysis.TypeCheckResult;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StringType;

import scala.collection.immutable.IndexedSeq;

/**
 * An expression of one column and a text fixed where it is built (field paths, a pattern),
 * which a subclass reads once, in its constructor, into what its `apply` uses. Catalyst wants a
 * case class: this is the part of one that Java does not write, alike for each of them. The text
 * is the expression's second element, what the plan shows and what equality compares: what it
 * was read into follows from it.
 *
 * Compiled into the jar of each subclass (router/jvm.py's BASES), so that each jar stands alone
 * wherever it is shipped.
 */
public abstract class TextArgumentExpression extends CalledExpression {
    protected final String argument;

    protected TextArgumentExpression(Expression child, String argument) {
        super(child);
        this.argument = argument;
    }

    /** The same expression of another column, as Catalyst rewrites a plan. */
    protected abstract Expression withChild(Expression child);

    /** Success when the column is a `type` (`what`, as the error names it). */
    protected final TypeCheckResult reads(Class<? extends DataType> type, String what) {
        if (type.isInstance(child.dataType())) {
            return TypeCheckResult.TypeCheckSuccess$.MODULE$;
        }
        return new TypeCheckResult.TypeCheckFailure(prettyName() + " reads " + what + ", not "
            + child.dataType().simpleString());
    }

    @Override
    public TypeCheckResult checkInputDataTypes() {
        return reads(StringType.class, "a STRING");
    }

    @Override
    public Expression withNewChildrenInternal(IndexedSeq<Expression> children) {
        return withChild(children.head());
    }

    @Override
    public int productArity() {
        return 2;
    }

    @Override
    public Object productElement(int n) {
        return n == 0 ? child : argument;
    }

    // The class itself, not this one: two subclasses of the same column and text differ.
    @Override
    public boolean canEqual(Object other) {
        return other != null && other.getClass() == getClass();
    }

    @Override
    public boolean equals(Object other) {
        return other instanceof TextArgumentExpression that && that.getClass() == getClass()
            && child.equals(that.child) && argument.equals(that.argument);
    }

    @Override
    public int hashCode() {
        return 31 * child.hashCode() + argument.hashCode();
    }
}

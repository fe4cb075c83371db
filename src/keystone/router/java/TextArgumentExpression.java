import java.io.Serializable;
import java.util.List;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.analysis.TypeCheckResult;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.codegen.Block;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeBlock;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator$;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.catalyst.expressions.codegen.JavaCode;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StringType;

import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * An expression of one column and a text fixed where it is built (field paths, a pattern),
 * which a subclass reads once, in its constructor, into what its `apply` uses. Catalyst wants a
 * case class: this is the part of one that Java does not write, alike for each of them. The text
 * is the expression's second element, what the plan shows and what equality compares: what it
 * was read into follows from it.
 *
 * Its generated code calls `apply` with the column's generated value. As a `CodegenFallback`
 * (which evaluates from the input row) it kept the projection that reads an event's JSON paths
 * and headers out of its query's whole-stage code: a projection of its own, copying every
 * event's bytes and headers into a row of its own before the rest of the plan read them.
 *
 * Compiled into the jar of each subclass (router/jvm.py's BASES), so that each jar stands alone
 * wherever it is shipped.
 */
public abstract class TextArgumentExpression extends Expression implements Serializable {
    protected final Expression child;
    protected final String argument;
    private final Seq<Expression> children;

    protected TextArgumentExpression(Expression child, String argument) {
        this.child = child;
        this.argument = argument;
        this.children = CollectionConverters.asScala(List.of(child)).toSeq();
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
    public Seq<Expression> children() {
        return children;
    }

    @Override
    public TypeCheckResult checkInputDataTypes() {
        return reads(StringType.class, "a STRING");
    }

    @Override
    public boolean nullable() {
        return true;
    }

    /** The value of the column's `value` (null where the column is null). */
    public abstract Object apply(Object value);

    @Override
    public final Object eval(InternalRow row) {
        return apply(child.eval(row));
    }

    @Override
    public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
        ExprCode argument = child.genCode(ctx);
        String self = ctx.addReferenceObj("expression", this, getClass().getName());
        CodeGenerator$ gen = CodeGenerator$.MODULE$;
        String result = ctx.freshName("result");
        // The column's values are objects (bytes, a string, an array): passed as they are.
        String code = argument.code() + "\n"
            + "Object " + result + " = " + self + ".apply(" + argument.isNull() + " ? null : "
            + "(Object) " + argument.value() + ");\n"
            + "boolean " + ev.isNull() + " = " + result + " == null;\n"
            + gen.javaType(dataType()) + " " + ev.value() + " = " + ev.isNull() + " ? "
            + gen.defaultValue(dataType(), true) + " : (" + gen.boxedType(dataType()) + ") "
            + result + ";\n";
        Block block = new CodeBlock(
            CollectionConverters.asScala(List.of(code)).toList(),
            CollectionConverters.asScala(List.<JavaCode>of()).toList());
        return new ExprCode(block, ev.isNull(), ev.value());
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

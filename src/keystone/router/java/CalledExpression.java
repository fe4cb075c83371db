import java.io.Serializable;
import java.util.List;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.codegen.Block;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeBlock;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator$;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.catalyst.expressions.codegen.JavaCode;

import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * An expression of one column whose value a Java method computes (`apply`): null in, null out.
 *
 * Its generated code calls `apply` with the column's generated value, so that the column's own
 * expression is compiled with the rest of the plan's stage. A `CodegenFallback` (which
 * evaluates from the input row) is kept out of the stage's code whole: its argument was
 * interpreted row by row (a language function's), and the projection that read an event's
 * JSON paths and headers ran on its own, copying every event's bytes and headers into a row
 * of its own before the rest of the plan read them.
 *
 * Compiled into the jar of each subclass (router/jvm.py's BASES), so that each jar stands alone
 * wherever it is shipped.
 */
public abstract class CalledExpression extends Expression implements Serializable {
    protected final Expression child;
    private final Seq<Expression> children;

    protected CalledExpression(Expression child) {
        this.child = child;
        this.children = CollectionConverters.asScala(List.of(child)).toSeq();
    }

    /** The value for the column's `value` (not null); null for none. */
    public abstract Object apply(Object value);

    @Override
    public final Seq<Expression> children() {
        return children;
    }

    @Override
    public boolean nullable() {
        return true;
    }

    @Override
    public final Object eval(InternalRow row) {
        Object value = child.eval(row);
        return value == null ? null : apply(value);
    }

    @Override
    public final ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
        ExprCode argument = child.genCode(ctx);
        String self = ctx.addReferenceObj("expression", this, getClass().getName());
        CodeGenerator$ gen = CodeGenerator$.MODULE$;
        String type = gen.javaType(dataType());
        String code = argument.code() + "\n"
            + "boolean " + ev.isNull() + " = " + argument.isNull() + ";\n"
            + type + " " + ev.value() + " = " + gen.defaultValue(dataType(), true) + ";\n"
            + "if (!" + ev.isNull() + ") {\n"
            // The value in parentheses: a literal's is `-1.0D`, and `(Double) -1.0D` reads as
            // a subtraction (the stage's code then fails to compile and runs interpreted).
            + "  Object result = " + self + ".apply((" + gen.boxedType(child.dataType()) + ") ("
            + argument.value() + "));\n"
            + "  if (result == null) { " + ev.isNull() + " = true; }\n"
            + "  else { " + ev.value() + " = (" + gen.boxedType(dataType()) + ") result; }\n"
            + "}\n";
        Block block = new CodeBlock(
            CollectionConverters.asScala(List.of(code)).toList(),
            CollectionConverters.asScala(List.<JavaCode>of()).toList());
        return new ExprCode(block, ev.isNull(), ev.value());
    }
}

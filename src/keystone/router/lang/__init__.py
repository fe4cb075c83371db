"""The filter and projection language: one parser to one AST, two backends that agree.

    parse_filter("country in ('US', 'CA') and device.type != 'test'", limits=...) -> Expr
    parse_projection(["guid", "user.id as user_id", "title"], limits=...) -> Projection
    evaluate.matches(expr, event) / evaluate.project(projection, event)   pure Python
    spark.compile_filter(expr, row) / spark.compile_projection(...)       Spark Columns

Semantics (both backends): SQL's three-valued logic over JSON types. A comparison is true or
false only when both sides have the same JSON type (string, number, boolean; numbers compare as
doubles); a missing field, a JSON null or a type mismatch makes it unknown. `is null` is true for
a missing field or a JSON null. `in (...)` is the OR of equalities, one node (`In`) evaluated
in one pass over its list; `like` applies to strings (`%` any run, `_` one code point, `\\`
escapes them), matched without backtracking (`like.py`, and router/java/LikeMatcher.java for
Spark: O(len(text) * len(pattern)) comparisons). A filter keeps an event only when it is
true. The names guid, timestamp, host and app are the event's metadata; every other name is a
path into the payload.

Bounds: any text parses to a tree or raises ExpressionError (422, the column and what was
expected), never anything else. Nesting of '(' and 'not' is at most `HARD_MAX_EXPRESSION_DEPTH`,
and a chain of 'and's or 'or's is a balanced tree, so every tree is shallow. With `limits` (what
control accepts into a new spec; without, a stored spec is read as it was accepted) the filter's
length, its nesting, an `in` list's values, a like pattern's wildcards and a projection's fields
are bounded too, each refusal naming its `setting` and `limit`.
"""

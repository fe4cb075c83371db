"""The filter and projection language: one parser to one AST, two backends that agree.

    parse_filter("country in ('US', 'CA') and device.type != 'test'") -> Expr
    parse_projection(["guid", "user.id as user_id", "title"]) -> Projection
    evaluate.matches(expr, event) / evaluate.project(projection, event)   pure Python
    spark.compile_filter(expr, row) / spark.compile_projection(...)       Spark Columns

Semantics (both backends): SQL's three-valued logic over JSON types. A comparison is true or
false only when both sides have the same JSON type (string, number, boolean; numbers compare as
doubles); a missing field, a JSON null or a type mismatch makes it unknown. `is null` is true for
a missing field or a JSON null. `in (...)` is the OR of equalities; `like` applies to strings
(`%` any run, `_` one character, `\\` escapes them). A filter keeps an event only when it is true.
The names guid, timestamp, host and app are the event's metadata; every other name is a path into
the payload.
"""

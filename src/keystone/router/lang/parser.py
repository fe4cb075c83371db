"""Text to AST. Errors say where (column) and what was expected:

filter:     or ;  or: and ("or" and)* ;  and: not ("and" not)* ;  not: "not" not | test
test:       "(" or ")" | value [ cmp value | "is" ["not"] "null"
            | ["not"] "in" "(" literal ("," literal)* ")" | ["not"] "like" string ]
value:      term (("+" | "-") term)* ;  term: factor (("*" | "/") factor)*
factor:     literal | path | name "(" [value ("," value)*] ")" | "(" value ")"
path:       name ("." name)* ;  literal: string | ["-"] number | true | false | null ;
            strings in single quotes, '' for a quote
projection: "*" ["except" path ("," path)*] | value ["as" name]  (a value other than a path
            needs its name; '*' may come with other items, which it then holds as well)

A '(' that opens a test may turn out to hold a value: `(a + b) * 2 > 3`; the group is read as a
condition, and a bare value followed by more of a value or a comparison becomes the test's
left side. Function names are in any case (`FUNCTIONS`); an unknown one, or the wrong number of
arguments, is refused with the list of known ones.

Any text gives a tree or an ExpressionError, never anything else: the parser recurses only
into '(' and function calls, whose nesting, with the 'not's and the operators of an arithmetic
chain, is bounded (always by `HARD_MAX_EXPRESSION_DEPTH`, with limits by
`max_expression_depth`), and a chain of 'and's or 'or's becomes a balanced tree, so that no
tree is deeper than that nesting plus the logarithms of its chains (the backends recurse once
per level). With `limits`, what a spec may ask of the router is bounded too (text, 'in' lists,
like wildcards, projected fields); without, a stored spec reads as it was accepted.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass

from keystone.contracts.errors import ExpressionError
from keystone.contracts.limits import HARD_MAX_EXPRESSION_DEPTH, Limits
from keystone.router.lang import like
from keystone.router.lang.ast import (
    FUNCTIONS,
    METADATA,
    TIME_FORMATS,
    And,
    Call,
    Column,
    Compare,
    Const,
    Expr,
    Field,
    In,
    IsNull,
    Like,
    Meta,
    Not,
    Operand,
    Or,
    Projection,
    Truth,
)

KEYWORDS = {"and", "or", "not", "in", "is", "null", "like", "true", "false", "as"}
_TOKEN = re.compile(
    r"""(?P<space>\s+)
      | (?P<number>(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)
      | (?P<string>'(?:[^']|'')*')
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<op><=|>=|!=|<>|=|<|>)
      | (?P<arith>[-+/])
      | (?P<punct>[(),.*])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class Token:
    kind: str  # number, string, name, keyword, op, punct, end
    text: str
    column: int  # 1-based, for messages

    def describe(self) -> str:
        return "the end" if self.kind == "end" else repr(self.text)


def _tokens(text: str) -> list[Token]:
    tokens, pos = [], 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            if text[pos] == "'":
                raise ExpressionError("a string is not closed", text, pos + 1, "a closing quote")
            raise ExpressionError(
                f"unexpected character {text[pos]!r}",
                text,
                pos + 1,
                "a name, a value or an operator",
            )
        kind = match.lastgroup
        if kind != "space":
            word = match.group()
            if kind == "name" and word.lower() in KEYWORDS:
                kind, word = "keyword", word.lower()
            tokens.append(Token(kind, word, pos + 1))
        pos = match.end()
    tokens.append(Token("end", "", len(text) + 1))
    return tokens


# The most characters mask keeps: any string is shorter (the router's are Java strings).
MAX_MASK_KEEP = 2**31 - 1
# How tightly each arithmetic operator binds.
_TIGHTNESS = {"+": 1, "-": 1, "*": 2, "/": 2}

# Every '\\' in a like pattern escapes the next character, which must be %, _ or \\ (as in Spark).
_PATTERN = re.compile(r"(?:[^\\]|\\[%_\\])*", re.DOTALL)


def _balanced(node: type[And] | type[Or], terms: list[Expr]) -> Expr:
    """`a op b op c ...` as a tree of logarithmic depth: and and or are associative (in
    three-valued logic too), and a long chain must not become a deep tree. Pairs are joined
    from the left, so a chain of two or three keeps its left-deep shape."""
    while len(terms) > 1:
        pairs = [node(terms[i], terms[i + 1]) for i in range(0, len(terms) - 1, 2)]
        terms = pairs + terms[len(terms) - len(terms) % 2 :]
    return terms[0]


def _refuse_over(
    limit: int, setting: str | None, count: int, what: str, text: str, column: int
) -> None:
    """Refuses `count` of `what` when over `limit`, naming the setting that holds it (None: the
    structural limit, which no setting raises)."""
    if count > limit:
        named = {"setting": setting} if setting else {}
        raise ExpressionError(
            f"{count} {what}; the limit is {limit} ({setting or 'structural'})",
            text,
            column,
            f"at most {limit} {what}",
            limit=limit,
            **named,
        )


class _Parser:
    def __init__(self, text: str, limits: Limits | None) -> None:
        self.text = text
        self.limits = limits
        self.tokens = _tokens(text)
        self.at = 0

    @property
    def token(self) -> Token:
        return self.tokens[self.at]

    def accept(self, kind: str, text: str | None = None) -> Token | None:
        token = self.token
        if token.kind == kind and (text is None or token.text == text):
            self.at += 1
            return token
        return None

    def expect(self, kind: str, text: str | None, what: str) -> Token:
        token = self.accept(kind, text)
        if token is None:
            self.fail(what)
        return token

    def fail(self, expected: str) -> None:
        raise ExpressionError(
            f"expected {expected}, found {self.token.describe()}",
            self.text,
            self.token.column,
            expected,
        )

    def over(self, setting: str, count: int, what: str, column: int) -> None:
        """Refuses `count` of `what` over the limit `setting`, if limits apply."""
        if self.limits is not None:
            limit = getattr(self.limits, setting)
            _refuse_over(limit, setting, count, what, self.text, column)

    # filter

    def filter(self) -> Expr:
        expr = self.disjunction(0)
        if self.token.kind != "end":
            self.fail("'and', 'or' or the end")
        return expr

    def disjunction(self, depth: int) -> Expr:
        """`depth`: how many '(' and 'not' this is nested in."""
        alternatives = []
        while True:
            factors = [self.negation(depth)]
            while self.accept("keyword", "and"):
                factors.append(self.negation(depth))
            alternatives.append(_balanced(And, factors))
            if not self.accept("keyword", "or"):
                return _balanced(Or, alternatives)

    def negation(self, depth: int) -> Expr:
        """A test under any number of 'not's: a loop, they need no recursion."""
        nots = 0
        while token := self.accept("keyword", "not"):
            nots += 1
            self.nest(depth + nots, token)
        depth += nots
        if token := self.accept("punct", "("):
            self.nest(depth + 1, token)
            expr = self.disjunction(depth + 1)
            self.expect("punct", ")", "')'")
            if isinstance(expr, Truth) and self.continues_value():
                # `(a + b) * 2 > 3`: the group held a value, the start of the test's left side.
                expr = self.test(depth, self.value(depth, expr.operand))
        else:
            expr = self.test(depth)
        for _ in range(nots):
            expr = Not(expr)
        return expr

    def continues_value(self) -> bool:
        """Whether the token after a value goes on with it: arithmetic or a test."""
        token = self.token
        return (
            token.kind in ("op", "arith")
            or (token.kind == "punct" and token.text == "*")
            or (token.kind == "keyword" and token.text in ("is", "in", "like", "not"))
        )

    def nest(self, depth: int, token: Token) -> None:
        """Refuses the '(', 'not', function or operator at `depth` when it is over the limit:
        the configured one, or without limits the structural one (so the parser and both
        backends, which recurse once per level, stay far from any stack's end)."""
        what = "levels of '(', 'not', functions and operators nested"
        if self.limits is None:
            _refuse_over(HARD_MAX_EXPRESSION_DEPTH, None, depth, what, self.text, token.column)
        else:
            self.over("max_expression_depth", depth, what, token.column)

    def test(self, depth: int, left: Operand | None = None) -> Expr:
        """`left`: the value it starts with, when read already."""
        if left is None:
            left = self.value(depth)
        if op := self.accept("op"):
            return Compare("!=" if op.text == "<>" else op.text, left, self.value(depth))
        if self.accept("keyword", "is"):
            negated = self.accept("keyword", "not") is not None
            self.expect("keyword", "null", "'null' after 'is'")
            return Not(IsNull(left)) if negated else IsNull(left)
        negated = self.accept("keyword", "not") is not None
        if self.accept("keyword", "in"):
            expr = self.membership(left)
        elif self.accept("keyword", "like"):
            expr = Like(left, self.pattern())
        elif negated:
            self.fail("'in' or 'like' after 'not'")
        else:
            return Truth(left)
        return Not(expr) if negated else expr

    def membership(self, left: Operand) -> Expr:
        self.expect("punct", "(", "'(' after 'in'")
        values = [self.literal()]
        while self.accept("punct", ","):
            self.over("max_in_values", len(values) + 1, "values in an 'in' list", self.token.column)
            values.append(self.literal())
        self.expect("punct", ")", "',' or ')'")
        return In(left, tuple(values))

    def pattern(self) -> str:
        token = self.token
        literal = self.literal()
        if not isinstance(literal.value, str):
            raise ExpressionError("a like pattern is a string", self.text, token.column, "a string")
        if not _PATTERN.fullmatch(literal.value):
            raise ExpressionError(
                "in a like pattern, '\\' escapes only %, _ or \\",
                self.text,
                token.column,
                "a valid pattern",
            )
        parts = like.segments(literal.value)  # the '%' between them, and '_' (None) in them
        wildcards = len(parts) - 1 + sum(part.count(None) for part in parts)
        self.over("max_like_wildcards", wildcards, "'%' and '_' in a like pattern", token.column)
        return literal.value

    # values

    def value(self, depth: int, first: Operand | None = None) -> Operand:
        """Factors joined by operators, '*' and '/' before '+' and '-', each left to right;
        `first`: its first factor, when read already. A loop, with the operators that wait for
        a tighter one's result on a stack: only '(' and calls recurse. Each operator of a chain
        is a level, so the tree is no deeper than its nesting allows (floating point is not
        associative: a chain cannot be balanced as 'and's are)."""
        operands = [first if first is not None else self.factor(depth)]
        operators: list[str] = []

        def join() -> None:
            right, left = self.computable(operands.pop()), self.computable(operands.pop())
            operands.append(Call(operators.pop(), (left, right)))

        while token := self.accept("arith") or self.accept("punct", "*"):
            depth += 1
            self.nest(depth, token)
            while operators and _TIGHTNESS[operators[-1]] >= _TIGHTNESS[token.text]:
                join()
            operators.append(token.text)
            operands.append(self.factor(depth))
        while operators:
            join()
        return operands[0]

    def factor(self, depth: int) -> Operand:
        if token := self.accept("punct", "("):
            self.nest(depth + 1, token)
            inner = self.value(depth + 1)
            self.expect("punct", ")", "an operator or ')'")
            return inner
        if self.token.kind == "name" and self.tokens[self.at + 1].text == "(":
            return self.call(depth)
        if self.token.kind == "name":
            return self.path()
        return self.literal()

    def call(self, depth: int) -> Call:
        token = self.expect("name", None, "a function")
        name = token.text.lower()
        signature = FUNCTIONS.get(name)
        if signature is None:
            known = ", ".join(sorted(FUNCTIONS))
            raise ExpressionError(
                f"unknown function {token.text!r}: the functions are {known}",
                self.text,
                token.column,
                f"one of {known}",
            )
        self.nest(depth + 1, self.expect("punct", "(", "'('"))
        args: list[Operand] = []
        if not self.accept("punct", ")"):
            while True:
                at = self.token
                if len(args) in signature.literals:
                    args.append(self.option(name, len(args)))
                else:
                    args.append(self.computable(self.value(depth + 1)))
                self.over("max_function_arguments", len(args), "arguments to a function", at.column)
                if not self.accept("punct", ","):
                    break
            self.expect("punct", ")", "',' or ')'")
        least, most = signature.arity
        if len(args) < least or (most is not None and len(args) > most):
            wanted = f"{least}" if least == most else f"at least {least}"
            raise ExpressionError(
                f"{name} takes {wanted} argument{'s' * (wanted != '1')}, not {len(args)}: "
                f"{signature.form}",
                self.text,
                token.column,
                signature.form,
            )
        return Call(name, tuple(args))

    def computable(self, value: Operand) -> Operand:
        """A value given to a function or projected: not a number literal beyond a double's
        range, which is infinite (it compares as such, but has no JSON to be written as)."""
        if isinstance(value.value if isinstance(value, Const) else None, float) and not (
            math.isfinite(value.value)  # type: ignore[union-attr, arg-type]
        ):
            raise ExpressionError(
                "a number beyond a double's range (1.8e308) is infinite: compare with it, but "
                "do not compute with it or project it",
                self.text,
                self.tokens[self.at - 1].column,
                "a number within a double's range",
            )
        return value

    def option(self, name: str, position: int) -> Const:
        """An argument written as a literal: `mask`'s count, `to_timestamp`'s format."""
        token = self.token
        literal = Const(None) if token.kind == "name" else self.literal()
        value = literal.value
        if name == "mask" and not (isinstance(value, int) and not isinstance(value, bool)):
            raise ExpressionError(
                "mask's second argument is how many characters it keeps",
                self.text,
                token.column,
                "an integer, 0 or more",
            )
        if name == "mask" and not 0 <= value <= MAX_MASK_KEEP:  # type: ignore[operator]
            raise ExpressionError(
                f"mask keeps 0 to {MAX_MASK_KEEP:,} characters",
                self.text,
                token.column,
                f"0 to {MAX_MASK_KEEP}",
            )
        if name == "to_timestamp" and value not in TIME_FORMATS:
            raise ExpressionError(
                f"{token.text} is not a time format to_timestamp reads",
                self.text,
                token.column,
                f"one of {', '.join(repr(f) for f in TIME_FORMATS)}",
            )
        return literal

    def literal(self) -> Const:
        token = self.token
        if self.accept("string"):
            return Const(token.text[1:-1].replace("''", "'"))
        sign = "-" if self.accept("arith", "-") else ""
        number = self.token
        if self.accept("number"):
            text = sign + number.text
            if not re.fullmatch(r"-?[0-9]+", text):
                return Const(float(text))
            try:
                return Const(int(text))
            except ValueError:  # over sys.get_int_max_str_digits(); as a double, infinite anyway
                raise ExpressionError(
                    "an integer of too many digits",
                    self.text,
                    token.column,
                    f"at most {sys.get_int_max_str_digits()} digits",
                ) from None
        if sign:
            self.fail("a number after '-'")
        for word, value in (("true", True), ("false", False), ("null", None)):
            if self.accept("keyword", word):
                return Const(value)
        self.fail("a value (a field, 'text', a number, true, false or null)")
        raise AssertionError  # fail() raised

    def path(self) -> Field | Meta:
        names = [self.expect("name", None, "a field name").text]
        while self.accept("punct", "."):
            names.append(self.expect("name", None, "a field name after '.'").text)
        if len(names) == 1 and names[0] in METADATA:
            return Meta(names[0])
        return Field(tuple(names))

    # projection

    def item(self) -> Column | tuple[Field, ...]:
        """A projected item: a named value, or `*` with the paths it leaves out."""
        if self.accept("punct", "*"):
            dropped: list[Field] = []
            if self.token.kind == "name" and self.token.text.lower() == "except":
                self.at += 1
                dropped.append(self.dropped())
                while self.accept("punct", ","):
                    dropped.append(self.dropped())
            if self.token.kind != "end":
                self.fail("'except' or the end after '*'" if not dropped else "',' or the end")
            return tuple(dropped)
        start = self.token
        source = self.computable(self.value(0))
        if self.accept("keyword", "as"):
            name = self.expect("name", None, "a name after 'as'").text
        elif isinstance(source, Meta):
            name = source.name
        elif isinstance(source, Field):
            name = source.path[-1]
        else:
            raise ExpressionError(
                "a computed field needs a name",
                self.text,
                self.token.column,
                f"'as' and a name after {self.text[start.column - 1 :].strip()!r}",
            )
        if self.token.kind != "end":
            self.fail("an operator, 'as' or the end")
        return Column(source, name)

    def dropped(self) -> Field:
        token = self.token
        path = self.path()
        if isinstance(path, Meta):
            raise ExpressionError(
                f"{path.name!r} is the event's metadata, not in the payload '*' keeps",
                self.text,
                token.column,
                "a field of the payload",
            )
        return path


def parse_filter(text: str, *, limits: Limits | None = None) -> Expr:
    """`limits`: what a new spec may ask (control's checks); None reads a stored one."""
    if limits is not None:  # before any other work on the text
        limit = limits.max_filter_chars
        _refuse_over(
            limit, "max_filter_chars", len(text), "characters in a filter", text, limit + 1
        )
    return _Parser(text, limits).filter()


def parse_projection(items: list[str], *, limits: Limits | None = None) -> Projection:
    """`limits`: what a new spec may ask (control's checks); None reads a stored one."""
    if limits is not None:
        limit = limits.max_projection_fields
        first_over = len(", ".join(items[:limit])) + 3  # the column of the first item over
        _refuse_over(
            limit,
            "max_projection_fields",
            len(items),
            "projected fields",
            ", ".join(items),
            first_over,
        )
        for item in items:
            chars = limits.max_filter_chars
            _refuse_over(
                chars, "max_filter_chars", len(item), "characters in an item", item, chars + 1
            )
    parsed = [_Parser(item, limits).item() for item in items]
    stars = [p for p in parsed if isinstance(p, tuple)]
    columns = [p for p in parsed if isinstance(p, Column)]
    if len(stars) > 1:
        raise ExpressionError(
            "'*' is given twice: list every path it leaves out after one 'except'",
            ", ".join(items),
            1,
            "one '*'",
        )
    names = [c.name for c in columns]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ExpressionError(
            f"two projected fields are named {duplicates[0]!r}: rename one with 'as'",
            ", ".join(items),
            1,
            "distinct names",
        )
    if stars:
        dropped = tuple(dict.fromkeys(f.path for f in stars[0]))
        return Projection(whole=True, columns=tuple(columns), dropped=dropped)
    return Projection(whole=False, columns=tuple(columns))

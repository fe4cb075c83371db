"""The site's reference pages, generated from the code each time the site is built.

MkDocs runs this file as a hook (`hooks:` in mkdocs.yml): `on_files` adds the pages below to the
build without writing them into docs/, so they cannot go stale in the repository. Each page is
also one plain function returning Markdown, which tests call (tests/contracts/test_limits.py),
and `python docs/gen_reference.py settings` prints one page.

What each page reads:

- CLI: the typer application's command tree (every command, its help, arguments, options).
- Settings: the fields of `keystone.contracts.settings.Settings`, the limits it inherits from
  `keystone.contracts.limits.Limits` in a table of their own.
- REST API: the OpenAPI documents of control's and the proxy's `create_app(settings)`. Creating
  an app opens nothing: Redis, Kafka and the fleet are only reached in its lifespan.
- Metrics: every Prometheus metric the code registers under a name of
  `keystone.contracts.metrics`, found by reading the source (no Spark needed).
- Alerts: the rules `keystone.dashboards.rules` generates for a sample stream.
- Functions: the routing language's functions (`keystone.router.lang.ast.FUNCTIONS`) and the
  rules every one of them follows (`keystone.router.lang.functions`).
- Sink types: each registered type's config module (`keystone.contracts.sinks.<type>`): what
  its docstring says, its config's fields, and its descriptor's answers.

Defaults are the code's own: the KEYSTONE_* variables and `.env` file of the machine that builds
the site are set aside while the pages are made.
"""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
import json
import os
import sys
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PAGES: dict[str, str] = {
    "reference/cli.md": "cli_reference",
    "reference/settings.md": "settings_reference",
    "reference/rest-api.md": "rest_api_reference",
    "reference/metrics.md": "metrics_reference",
    "reference/alerts.md": "alerts_reference",
    "reference/functions.md": "functions_reference",
    "reference/sinks.md": "sinks_reference",
    "reference/kafka-users.md": "kafka_users_reference",
}
GENERATED = (
    "<!-- Generated from the code by docs/gen_reference.py at build time; not a file in the "
    "repository. -->\n\n"
)


# MkDocs


def on_files(files: Any, config: Any) -> Any:
    """MkDocs hook: adds every reference page, generated now, to the site's files."""
    from mkdocs.structure.files import File

    for path, function in PAGES.items():
        render: Callable[[], str] = globals()[function]
        files.append(File.generated(config, path, content=render()))
    return files


# Markdown helpers


def cell(text: object) -> str:
    """Text for a Markdown table cell: one line, pipes escaped, and outside code spans the
    characters Markdown or HTML would read as markup escaped."""
    parts = str(text).replace("\n", " ").split("`")
    for i in range(0, len(parts), 2):  # the even parts are outside code spans
        part = parts[i].replace("\\", "\\\\")
        for char in "*_[]":
            part = part.replace(char, f"\\{char}")
        parts[i] = part.replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts).replace("|", "\\|")


def prose(text: str) -> str:
    """A paragraph of text from the code, as Markdown (`cell`'s escapes, lines kept)."""
    return "\n".join(cell(line) for line in text.splitlines())


def code(text: object) -> str:
    """An inline code span holding `text` exactly, whatever backticks it contains."""
    text = str(text)
    fence = "`"
    while fence in text:
        fence += "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def anchor(text: str) -> str:
    """The id MkDocs' table of contents gives a heading of this text (toc's default slugify)."""
    from markdown.extensions.toc import slugify

    return slugify(text, "-")


# Settings


@contextmanager
def code_defaults() -> Iterator[None]:
    """Sets aside the KEYSTONE_* variables of the building machine (and, through the callers'
    `_env_file=None`, its .env file), so pages show the code's defaults."""
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("KEYSTONE_")}
    try:
        yield
    finally:
        os.environ.update(saved)


def default_settings() -> Any:
    from keystone.contracts.settings import Settings

    with code_defaults():
        return Settings(_env_file=None)  # type: ignore[call-arg]


def placeholders(text: str) -> str:
    """The working directory in a default (a path made from it) as `<cwd>`."""
    return text.replace(str(Path.cwd()), "<cwd>")


def shown_default(name: str, field: Any, settings: Any) -> str:
    """A field's default as one would write it in the environment. A default made by a factory
    (a path under the working directory, say) or derived from other settings (an address from
    its port) is shown as the value it takes when every other setting keeps its default."""
    from pydantic import SecretStr
    from pydantic_core import PydanticUndefined

    default = field.default
    if default is PydanticUndefined and field.default_factory is not None:
        return code(placeholders(str(getattr(settings, name))))
    if isinstance(default, SecretStr):
        default = default.get_secret_value()
    if default == "":
        derived = getattr(settings, name)
        if isinstance(derived, SecretStr):
            derived = derived.get_secret_value()
        if derived:
            return f"{code(placeholders(str(derived)))} (derived)"
        return "(empty)"
    if isinstance(default, bool):
        return code(str(default).lower())
    if isinstance(default, Path):
        return code(placeholders(str(default)))
    shown = code(default)
    if isinstance(default, int) and name.endswith("_bytes"):
        shown += f" ({binary_size(default)})"
    return shown


def binary_size(n: int) -> str:
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def bounds(field: Any) -> str:
    """The field's numeric bounds (pydantic's ge/gt/le/lt), as text."""
    signs = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}
    found = []
    for meta in field.metadata:
        for attribute, sign in signs.items():
            value = getattr(meta, attribute, None)
            if value is not None:
                found.append(f"{sign} {value:,}" if isinstance(value, int) else f"{sign} {value}")
    return ", ".join(found)


def type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def field_groups(cls: type) -> list[tuple[str, str, list[str]]]:
    """The fields `cls` declares itself, grouped as its source groups them: a block of lines
    between blank lines that starts with a comment is a group titled by that comment (its first
    sentence the title, the rest a note); fields in blocks without one are "General"."""
    lines, _ = inspect.getsourcelines(cls)
    own = [n for n in cls.__annotations__ if n in cls.model_fields]  # type: ignore[attr-defined]
    groups: list[tuple[str, str, list[str]]] = []
    general: list[str] = []
    comment: list[str] = []
    current: list[str] | None = None
    at_block_start = True
    for line in lines[1:]:
        stripped = line.strip()
        if not stripped:
            at_block_start, comment, current = True, [], None
            continue
        if stripped.startswith("#"):
            if at_block_start:
                comment.append(stripped.lstrip("# "))
            continue
        if at_block_start and comment:
            text = " ".join(comment)
            head, _, rest = (
                text.partition(";") if ";" in text.split(". ")[0] else text.partition(". ")
            )
            current, rest = [], rest.strip()
            groups.append((head.strip().rstrip("."), rest[:1].upper() + rest[1:], current))
        at_block_start = False
        name = stripped.split(":", 1)[0]
        if name in own:
            (current if current is not None else general).append(name)
    if general:
        groups.insert(0, ("General", "", general))
    return [g for g in groups if g[2]]


def settings_rows(cls: type, names: list[str], settings: Any, prefix: str) -> list[list[str]]:
    rows = []
    for name in names:
        field = cls.model_fields[name]  # type: ignore[attr-defined]
        rows.append(
            [
                code(f"{prefix}{name.upper()}"),
                code(type_name(field.annotation)),
                shown_default(name, field, settings),
                cell(bounds(field)),
                cell(field.description or ""),
            ]
        )
    return rows


def settings_tables(cls: type, settings: Any, prefix: str, level: str) -> str:
    header = ["variable", "type", "default", "bounds", "meaning"]
    out = []
    for title, note, names in field_groups(cls):
        out.append(f"{level} {title}\n\n")
        if note:
            out.append(f"{prose(note)}\n\n")
        out.append(table(header, settings_rows(cls, names, settings, prefix)) + "\n")
    return "".join(out)


def settings_reference() -> str:
    from keystone.contracts import limits as limits_module
    from keystone.contracts.limits import Limits
    from keystone.contracts.settings import ADDRESS_SETTING, Settings

    settings = default_settings()
    prefix = Settings.model_config.get("env_prefix", "")
    external: dict[str, list[str]] = {}
    for service, setting in ADDRESS_SETTING.items():
        external.setdefault(setting, []).append(service)

    out = [
        GENERATED,
        "# Settings\n\n",
        prose(inspect.cleandoc(sys.modules[Settings.__module__].__doc__ or "")),
        "\n\n",
        f"Each setting is the environment variable `{prefix}<FIELD>` (the field's name in upper "
        "case), or that line in a `.env` file in the working directory. "
        "`<cwd>` stands for the working directory; a default marked *derived* follows "
        "from other settings and is shown as it is when they keep their defaults. Groups and "
        "their notes are those of the settings' source.\n\n",
        settings_tables(Settings, settings, prefix, "##"),
        "Setting one of these addresses makes the services named beside it external: the "
        "stack neither starts nor stops them, it only checks their health.\n\n",
        table(
            ["variable", "external services"],
            [
                [code(f"{prefix}{setting.upper()}"), ", ".join(services)]
                for setting, services in external.items()
            ],
        ),
        "\n## Limits\n\n",
        prose(inspect.cleandoc(limits_module.__doc__ or "")),
        "\n\n",
        "What each limit guards, and what a refused request looks like: "
        "[Limits](../concepts/limits.md).\n\n",
        settings_tables(Limits, settings, prefix, "###"),
        "### Fixed bounds\n\n",
        "Bounds that no setting raises: the readers of stored specs rely on them.\n\n",
        table(["constant", "value", "why"], fixed_bounds(limits_module)),
    ]
    return "".join(out)


def fixed_bounds(module: Any) -> list[list[str]]:
    """The module's upper-case integer constants with the comment above each."""
    source = inspect.getsource(module).splitlines()
    rows = []
    comment: list[str] = []
    for line in source:
        stripped = line.strip()
        if stripped.startswith("#") and not line.startswith(" "):
            comment.append(stripped.lstrip("# "))
            continue
        name = line.split("=", 1)[0].strip()
        value = getattr(module, name, None) if name.isupper() and "=" in line else None
        if isinstance(value, int) and not line.startswith(" "):
            rows.append([code(name), f"{value:,}", cell(" ".join(comment))])
        comment = []
    return rows


# CLI


def cli_module() -> Any:
    """The module whose `app` is the typer application of the `keystone` command."""
    return importlib.import_module("keystone.cli")


def unescape(text: str) -> str:
    """Help text as the terminal shows it: rich's escaped brackets unescaped."""
    return text.replace("\\[", "[")


# Typer carries its own copy of click (typer._click), so the command tree is read by duck
# typing: a group has `list_commands`, a parameter says whether it is an argument or an option.


TYPE_NAMES = {str: "text", int: "integer", float: "number", bool: "boolean", Path: "path"}


def param_type(param: Any) -> str:
    if getattr(param, "is_flag", False):
        return "flag"
    # typer keeps the annotation it read; click-style parameters have a `type`
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    click_type = getattr(param, "type", None)
    choices: list[Any] = []
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        choices = [member.value for member in annotation]
    elif annotation is None and click_type is not None:
        choices = list(getattr(click_type, "choices", None) or [])
    if choices:
        return " or ".join(code(c) for c in choices)
    if typing.get_origin(annotation) in (list, tuple):  # a repeatable option: its item's type
        annotation = (typing.get_args(annotation) or (str,))[0]
    if annotation is not None:
        name = getattr(annotation, "__name__", "")
        kind = "file" if name.startswith("File") else TYPE_NAMES.get(annotation, name or "text")
    else:
        kind = getattr(click_type, "name", "text").removesuffix(" range")
    limits = []
    for attribute, sign in (("min", "≥"), ("max", "≤")):
        value = getattr(param, attribute, None)
        if value is None:
            value = getattr(click_type, attribute, None)
        if value is not None:
            limits.append(f"{sign} {value}")
    if limits:
        kind += f" ({', '.join(limits)})"
    if getattr(param, "multiple", False):
        kind += ", repeatable"
    return kind


def param_default(param: Any) -> str:
    default = param.default
    if default is None or callable(default) or getattr(param, "is_flag", False):
        return ""
    if isinstance(default, list | tuple):
        return ", ".join(code(d) for d in default)
    return code(default)


def param_row(param: Any) -> list[str]:
    if not getattr(param, "opts", [""])[0].startswith("-"):  # an argument
        shown = code(getattr(param, "metavar", None) or param.name)
    else:
        shown = ", ".join(code(o) for o in [*param.opts, *param.secondary_opts])
    help_text = unescape(getattr(param, "help", None) or "")
    envvar = getattr(param, "envvar", None)
    if envvar:
        help_text += f" (env {', '.join(envvar) if isinstance(envvar, list) else envvar})"
    required = "yes" if param.required else ""
    return [shown, param_type(param), required, param_default(param), cell(help_text)]


def command_section(path: list[str], command: Any, ctx: Any) -> str:
    name = " ".join(path)
    help_text = unescape(inspect.cleandoc(command.help or ""))
    usage = " ".join([name, *command.collect_usage_pieces(ctx)])
    out = [f"{'##' if len(path) <= 2 else '###'} {name}\n\n"]
    if help_text:
        out.append(f"{prose(help_text)}\n\n")
    out.append(f"```\n{usage}\n```\n\n")
    help_option = command.get_help_option(ctx)
    rows = [
        param_row(p)
        for p in command.get_params(ctx)
        if p is not help_option and not getattr(p, "hidden", False)
    ]
    if rows:
        header = ["argument or option", "type", "required", "default", "help"]
        out.append(table(header, rows) + "\n")
    if not hasattr(command, "list_commands"):
        return "".join(out)
    children = [(sub, command.get_command(ctx, sub)) for sub in command.list_commands(ctx)]
    children = [(sub, c) for sub, c in children if c is not None and not c.hidden]
    listed = [
        [
            f"[{code(' '.join([*path, sub]))}](#{anchor(' '.join([*path, sub]))})",
            cell(unescape(c.get_short_help_str(limit=300))),
        ]
        for sub, c in children
    ]
    out.append(table(["command", "what it does"], listed) + "\n")
    for sub, child in children:
        child_ctx = child.context_class(child, info_name=sub, parent=ctx)
        out.append(command_section([*path, sub], child, child_ctx))
    return "".join(out)


def cli_reference() -> str:
    import typer

    module = cli_module()
    root = typer.main.get_command(module.app)
    ctx = root.context_class(root, info_name="keystone")
    return "".join(
        [
            GENERATED,
            "# The keystone command\n\n",
            f"Made from the command's own definitions ({code(module.__name__ + '.app')}). "
            "Every command also takes `--help`; settings (`KEYSTONE_*`, see "
            "[Settings](settings.md)) apply to all of them. Errors the project raises on "
            "purpose print `error: <message>` (and the error's details as JSON) and exit 1; "
            "invalid settings exit 2.\n\n",
            command_section(["keystone"], root, ctx),
        ]
    )


# REST API


def schema_type(schema: dict[str, Any], models_anchor: Callable[[str], str]) -> str:
    """A JSON Schema as a short type: a model as a link to its table below, arrays as
    `array of ...`, alternatives joined by `or`."""
    if "$ref" in schema:
        model = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{model}](#{models_anchor(model)})"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [schema_type(s, models_anchor) for s in schema[key]]
            return " or ".join(dict.fromkeys(options))
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return schema_type(schema["allOf"][0], models_anchor)
    if "const" in schema:
        return code(json.dumps(schema["const"]))
    if "enum" in schema:
        return " or ".join(code(json.dumps(v)) for v in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        return f"array of {schema_type(items, models_anchor)}" if items else "array"
    if kind == "object":
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            return f"object of {schema_type(extra, models_anchor)}"
        return "object"
    if isinstance(kind, list):
        return " or ".join(kind)
    return kind or "any"


# FastAPI's own 422 models: both services answer with their error form instead.
FASTAPI_ERRORS = ("HTTPValidationError", "ValidationError")
ERROR_FORM = "the error form (above), with `problems`"

CONSTRAINTS = (
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "pattern",
)


def constraints(schema: dict[str, Any]) -> str:
    found = []
    for option in [schema, *schema.get("anyOf", [])]:
        for key in CONSTRAINTS:
            if key in option:
                value = option[key]
                if isinstance(value, float) and value.is_integer():
                    value = int(value)
                found.append(code(f"{key}: {value}"))
    return ", ".join(found)


def operation_section(
    method: str, path: str, op: dict[str, Any], models_anchor: Callable[[str], str]
) -> str:
    out = [f"#### {method.upper()} {path}\n\n"]
    if op.get("summary"):
        out.append(f"**{cell(op['summary'])}.** ")
    if op.get("description"):
        out.append(prose(op["description"]))
    out.append("\n\n")
    params = op.get("parameters", [])
    if params:
        rows = [
            [
                code(p["name"]),
                p["in"],
                "yes" if p.get("required") else "",
                schema_type(p.get("schema", {}), models_anchor),
                cell(p.get("description", "")),
            ]
            for p in params
        ]
        out.append(table(["parameter", "in", "required", "type", "description"], rows) + "\n")
    body = op.get("requestBody")
    if body:
        kinds = [
            f"{code(media)}: {schema_type(content.get('schema', {}), models_anchor)}"
            for media, content in body.get("content", {}).items()
        ]
        out.append(f"Request body{' (required)' if body.get('required') else ''}: ")
        out.append("; ".join(kinds) + ".\n\n")
    rows = []
    for status, response in op.get("responses", {}).items():
        content = response.get("content", {})
        shown = [
            ERROR_FORM
            if c["schema"].get("$ref", "").endswith("/HTTPValidationError")
            else schema_type(c["schema"], models_anchor)
            for c in content.values()
            if c.get("schema")
        ]
        rows.append([code(status), cell(response.get("description", "")), " or ".join(shown)])
    out.append(table(["status", "meaning", "body"], rows) + "\n")
    return "".join(out)


def model_section(name: str, schema: dict[str, Any], models_anchor: Callable[[str], str]) -> str:
    out = [f"#### {name}\n\n"]
    if schema.get("description"):
        out.append(prose(schema["description"]) + "\n\n")
    properties = schema.get("properties", {})
    required = set(schema.get("required", []))
    if properties:
        rows = []
        for field, prop in properties.items():
            default = prop.get("default")
            rows.append(
                [
                    code(field),
                    schema_type(prop, models_anchor),
                    "yes" if field in required else "",
                    code(json.dumps(default)) if "default" in prop else "",
                    constraints(prop),
                    cell(prop.get("description", "")),
                ]
            )
        out.append(
            table(["field", "type", "required", "default", "bounds", "description"], rows) + "\n"
        )
    elif schema.get("type") or schema.get("anyOf") or schema.get("oneOf"):
        out.append(f"{schema_type(schema, models_anchor)}\n\n")
    discriminator = schema.get("discriminator")
    if discriminator:
        out.append(f"Told apart by its {code(discriminator['propertyName'])} field.\n\n")
    return "".join(out)


def api_section(title: str, spec: dict[str, Any], key: str) -> str:
    def models_anchor(model: str) -> str:
        return f"{key}-{anchor(model)}"

    info = spec.get("info", {})
    out = [f"## {title}\n\n", prose(info.get("description", "")), "\n\n"]
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, methods in spec.get("paths", {}).items():
        for method, op in methods.items():
            tag = (op.get("tags") or ["other"])[0]
            by_tag.setdefault(tag, []).append((method, path, op))
    for tag, ops in by_tag.items():
        if len(by_tag) > 1:
            out.append(f"### {cell(tag.capitalize())}\n\n")
        for method, path, op in ops:
            out.append(operation_section(method, path, op, models_anchor))
    models = spec.get("components", {}).get("schemas", {})
    if models:
        out.append(f"### {title}: models\n\n")
        for name, schema in models.items():
            if name in FASTAPI_ERRORS:
                continue
            section = model_section(name, schema, models_anchor)
            # A heading with an explicit id, so two APIs' models of one name stay apart.
            first, rest = section.split("\n", 1)
            out.append(f"{first} {{#{models_anchor(name)}}}\n{rest}")
    return "".join(out)


def openapi_documents() -> dict[str, dict[str, Any]]:
    """The OpenAPI documents of control and the proxy, as served with default settings."""
    from keystone.control.app import create_app as control_app
    from keystone.ingest_proxy.app import create_app as proxy_app

    settings = default_settings()
    return {"control": control_app(settings).openapi(), "proxy": proxy_app(settings).openapi()}


def rest_api_reference() -> str:
    documents = openapi_documents()
    settings = default_settings()
    return "".join(
        [
            GENERATED,
            "# REST API\n\n",
            "Made from the OpenAPI documents the services serve (`/openapi.json`, and as pages at "
            f"`/docs`): control at {code(settings.control_url)}, the ingest proxy at "
            f"{code(settings.proxy_url)} by default. Bounds shown are the default limits; a "
            "deployment's own are in its `/openapi.json`.\n\n",
            "Every `/v1/` call to control carries `Authorization: Bearer <token>`: the admin's "
            "token or an owner's. Calls to the proxy carry an app's key the same way. Errors are "
            'JSON: `{"error": <type>, "message": ..., ...}` with details such as `problems: '
            "[{field, message}]` on a 422, or `setting` and `limit` when a limit refused the "
            "request. Only the answers each service's OpenAPI document declares are listed; every "
            "refusal (400, 401, 403, 404, 409, 413, 415, 422, 429, 503) comes in that form. "
            "What the proxy answers, case by case: "
            "[The ingest proxy](../concepts/ingest-proxy.md#answers).\n\n",
            api_section("Control", documents["control"], "control"),
            api_section("Ingest proxy", documents["proxy"], "proxy"),
        ]
    )


# Metrics


METRIC_KINDS = {
    "Counter": "counter",
    "Gauge": "gauge",
    "Histogram": "histogram",
    "Summary": "summary",
    "Info": "info",
    "Enum": "stateset",
    "CounterMetricFamily": "counter",
    "GaugeMetricFamily": "gauge",
    "HistogramMetricFamily": "histogram",
    "SummaryMetricFamily": "summary",
}


def package_root() -> Path:
    import keystone

    return Path(keystone.__file__).resolve().parent


class MetricNames:
    """How one module refers to the constants of keystone.contracts.metrics: through a module
    alias (`names.ROUTER_UP`, `m.ROUTER_UP`) or imported by name."""

    def __init__(self, tree: ast.Module, constants: dict[str, str]) -> None:
        self.constants = constants
        self.aliases: set[str] = set()
        self.direct: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "keystone.contracts":
                self.aliases |= {a.asname or a.name for a in node.names if a.name == "metrics"}
            elif isinstance(node, ast.ImportFrom) and node.module == "keystone.contracts.metrics":
                self.direct |= {a.asname or a.name: a.name for a in node.names}
            elif isinstance(node, ast.Import):
                self.aliases |= {
                    a.asname
                    for a in node.names
                    if a.name == "keystone.contracts.metrics" and a.asname
                }

    def constant(self, node: ast.expr) -> str | None:
        """The constant an expression names: `names.X`, `names.X.removesuffix(...)` or `X`."""
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "removesuffix"
        ):
            node = node.func.value
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in self.aliases
            and node.attr in self.constants
        ):
            return node.attr
        if isinstance(node, ast.Name) and node.id in self.direct:
            return self.direct[node.id]
        return None


def metric_registrations() -> list[dict[str, Any]]:
    """Every call creating a Prometheus metric (prometheus_client's classes) whose name is a
    constant of keystone.contracts.metrics, found in the package's source."""
    from keystone.contracts import metrics

    constants = {k: v for k, v in vars(metrics).items() if k.isupper() and isinstance(v, str)}
    root = package_root()
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        names = MetricNames(tree, constants)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            kind = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            name = names.constant(node.args[0]) if kind in METRIC_KINDS else None
            if name is None:
                continue
            kwargs = {k.arg: k.value for k in node.keywords}
            help_node = node.args[1] if len(node.args) > 1 else kwargs.get("documentation")
            labels_node = (
                node.args[2]
                if len(node.args) > 2
                else kwargs.get("labelnames", kwargs.get("labels"))
            )
            found.append(
                {
                    "constant": name,
                    "name": constants[name],
                    "type": METRIC_KINDS[kind],
                    "labels": [e.value for e in labels_node.elts if isinstance(e, ast.Constant)]
                    if isinstance(labels_node, ast.List | ast.Tuple)
                    else [],
                    "help": help_node.value if isinstance(help_node, ast.Constant) else "",
                    "where": f"src/keystone/{path.relative_to(root).as_posix()}",
                }
            )
    return found


def contract_comments() -> dict[str, str]:
    """The comment beside each name in keystone/contracts/metrics.py."""
    from keystone.contracts import metrics

    comments = {}
    for line in inspect.getsource(metrics).splitlines():
        if "=" in line and "#" in line:
            name = line.split("=", 1)[0].strip()
            if name.isupper():
                comments[name] = line.split("#", 1)[1].strip()
    return comments


def metrics_reference() -> str:
    from keystone.contracts import metrics

    registrations = metric_registrations()
    registered = {r["constant"] for r in registrations}
    comments = contract_comments()
    rows = [
        [
            code(
                r["name"]
                + ("_total" if r["type"] == "counter" and not r["name"].endswith("_total") else "")
            ),
            r["type"],
            ", ".join(code(label) for label in r["labels"]),
            cell(r["help"]),
            code(r["where"]),
        ]
        for r in registrations
    ]
    unregistered = [
        [code(value), cell(comments.get(name, ""))]
        for name, value in vars(metrics).items()
        if name.isupper() and isinstance(value, str) and name not in registered
    ]
    values = [
        [code(name), ", ".join(code(v) for v in value)]
        for name, value in vars(metrics).items()
        if name.isupper() and isinstance(value, tuple)
    ]
    out = [
        GENERATED,
        "# Metrics\n\n",
        prose(inspect.cleandoc(metrics.__doc__ or "")),
        " Each name is a constant of `keystone.contracts.metrics`; this page lists every place "
        "the code registers one, with its type, labels and help text. A counter is exposed "
        "with `_total`, a histogram as `_bucket`, `_sum` and `_count`.\n\n",
        table(["metric", "type", "labels", "help", "registered in"], rows),
        "\nLabel values the contracts fix:\n\n",
        table(["constant", "values"], values),
    ]
    if unregistered:
        out += [
            "\nNames of the contracts no registration was found for (the comment beside each):\n\n",
            table(["metric", "contract"], unregistered),
        ]
    out.append(
        "\nEvery component is a Prometheus target, written by the stack (the proxy, control) or "
        "by control's fleet (each router, job `keystone_router`, as `router-<stream>`). The "
        "recording rules built over these metrics are on the [alerts](alerts.md) page.\n"
    )
    return "".join(out)


# Alerts


SAMPLE_SPEC = """\
name: playback
owner: team-playback
partitions: 6
outputs:
  - name: warehouse
    sink: {type: hive}
  - name: billing
    sink: {type: kafka}
    delivery: {mode: microbatch, guarantee: exactly_once}
"""


def alerts_reference() -> str:
    from keystone.contracts.spec import load_spec
    from keystone.dashboards import rules as rules_module

    settings = default_settings()
    spec = load_spec(SAMPLE_SPEC)
    dashboard = f"{settings.control_url}/ui/streams/{spec.name}/dashboard"
    document = rules_module.rules(spec, dashboard)
    objectives = spec.objectives.model_dump()
    out = [
        GENERATED,
        "# Alerts and recording rules\n\n",
        prose(inspect.cleandoc(rules_module.__doc__ or "")),
        "\n\n",
        "Below, the rules generated for this sample stream, whose objectives are the defaults ("
        + ", ".join(f"{code(k)} {code(v)}" for k, v in objectives.items())
        + "). A stream's own objectives change the thresholds; its name changes the `stream` "
        "selector.\n\n",
        f"```yaml\n{SAMPLE_SPEC}```\n\n",
        "Control writes them to `<state_dir>/prometheus/rules/<stream>.yml`, once `promtool "
        "check rules` accepts them, and has Prometheus reload. How to read and wire them: "
        "[Dashboards and alerts](../how-to/dashboards-and-alerts.md).\n\n",
    ]
    for group in document["groups"]:
        recorded = [r for r in group["rules"] if "record" in r]
        alerts = [r for r in group["rules"] if "alert" in r]
        out.append(f"Rule group: {code(group['name'])}.\n\n")
        out.append("## Alerts\n\n")
        out.append(
            table(
                ["alert", "severity", "for", "summary"],
                [
                    [
                        f"[{code(a['alert'])}](#{anchor(a['alert'])})",
                        a["labels"].get("severity", ""),
                        code(a.get("for", "0m")),
                        code(a["annotations"].get("summary", "")),
                    ]
                    for a in alerts
                ],
            )
        )
        out.append("\n")
        for a in alerts:
            labels = ", ".join(code(f"{k}={v}") for k, v in a["labels"].items())
            out += [
                f"### {a['alert']}\n\n",
                f"Fires when this expression has held for {code(a.get('for', '0m'))}. "
                f"Labels: {labels}. Annotations: "
                f"{', '.join(code(k) for k in a.get('annotations', {}))}.\n\n",
                f"```promql\n{a['expr']}\n```\n\n",
                f"Description: {code(a['annotations'].get('description', ''))}\n\n",
            ]
        out.append("## Recording rules\n\n")
        out.append("They keep the dashboards' and the alerts' usual questions cheap.\n\n")
        for r in recorded:
            out.append(f"{code(r['record'])}\n\n```promql\n{r['expr']}\n```\n\n")
    return "".join(out)


def functions_reference() -> str:
    from keystone.router.lang import functions
    from keystone.router.lang.ast import ARITHMETIC, FUNCTIONS

    rows = "".join(f"| {code(sig.form)} | {cell(sig.summary)} |\n" for sig in FUNCTIONS.values())
    return "".join(
        [
            GENERATED,
            "# Functions\n\n",
            "Functions and arithmetic in filters and projections: what each gives, and the rules "
            "they all follow. Names are in any case; a projected value other than a path needs "
            "its name (`lower(email) as email`). Examples, and why they are built as they are: "
            "[the language](../concepts/language.md#functions).\n\n",
            "## The rules\n\n",
            prose(inspect.cleandoc(functions.__doc__ or "")),
            "\n\n## Every function\n\n",
            "| call | gives |\n| --- | --- |\n",
            rows,
            "\n## Arithmetic\n\n",
            f"{', '.join(code(op) for op in ARITHMETIC)} on two numbers, as doubles, `*` and `/` "
            "before `+` and `-`, each left to right, parentheses as usual. A division by zero, "
            "an overflow or anything not a number gives null. `-` before a number literal makes "
            "it negative; before anything else, write `0 - x`.\n",
        ]
    )


def sinks_reference() -> str:
    from keystone.contracts import sinks

    sections = []
    for config in sinks.SINKS:
        kind = config.kind
        name = config.model_fields["type"].default
        fields = [
            [code(f), cell(type_name(field.annotation)), cell(field.description or "")]
            for f, field in config.model_fields.items()
            if f != "type"
        ]
        facts = [
            ["delivery modes", ", ".join(code(m) for m in kind.modes) + " (the first by default)"],
            ["under Real-time Mode", "yes" if kind.realtime else "no: micro-batches"],
            ["records written again", code(kind.replay.value)],
            [
                "after a crash",
                "exactly once"
                if kind.exact
                else "at least once, or exactly once "
                "in Kafka transactions (`delivery.guarantee: exactly_once`)",
            ],
            ["writes to", cell(config.model_construct(**_sample(config)).target("plays", "out"))],
        ]
        module = importlib.import_module(config.__module__)
        sections.append(
            f"## {kind.label} (`{name}`)\n\n"
            + prose(inspect.cleandoc(module.__doc__ or ""))
            + "\n\n"
            + table(["", name], facts)
            + ("\n\nIts fields:\n\n" + table(["field", "type", ""], fields) if fields else "")
            + "\n"
        )
    return "".join(
        [
            GENERATED,
            "# Sink types\n\n",
            "Where an output delivers: `outputs[].sink` in the [stream spec]"
            "(../concepts/stream-spec.md), its `type` one of those below, each with its fields. "
            "Each type is one unit ([the router](../concepts/router.md#sinks)); `writes to` shows "
            "an output `out` of a stream `plays` (into a stream `other`).\n\n",
            prose(inspect.cleandoc(sinks.__doc__ or "")),
            "\n\n",
            *sections,
        ]
    )


def _sample(config: type) -> dict[str, Any]:
    """Values for a config's required fields, to show where it writes."""
    return {f: "other" for f, field in config.model_fields.items() if field.is_required()}


if __name__ == "__main__":
    pages = {Path(p).stem: f for p, f in PAGES.items()}
    wanted = sys.argv[1:] or list(pages)
    for page in wanted:
        print(globals()[pages[page]]())


def kafka_users_reference() -> str:
    from keystone.contracts import kafka_clients
    from keystone.control import kafka_access
    from keystone.stack import kafka_security as ks

    def allowed(grants) -> str:
        return "<br>".join(
            f"{'cluster' if name == 'kafka-cluster' else kind.name.lower()} {code(name)}"
            f"{' (prefix)' if pattern.name == 'PREFIXED' else ''}: {op.name.lower()}"
            for kind, name, pattern, op in sorted(grants, key=lambda g: (g[0].name, g[1], g[3]))
        )

    rows = [[code(user.name), cell(user.does), allowed(user.grants)] for user in ks.SERVICE_USERS]
    app = [
        [
            code(kafka_clients.app_user("APP")),
            "an app's own user, to write straight to Kafka (granted APP the streams s1 and s2)",
            allowed(kafka_access.app_grants(["s1", "s2"])),
        ]
    ]
    return (
        GENERATED
        + "# Kafka users and ACLs\n\n"
        + prose(inspect.cleandoc(ks.__doc__ or ""))
        + "\n\n"
        + f"Super users: {', '.join(code(u) for u in ks.SUPER_USERS)}.\n\n"
        + table(["user", "what it does", "allowed"], rows)
        + "\n\n## Apps' own users\n\n"
        + prose(inspect.cleandoc(kafka_access.__doc__ or ""))
        + "\n\n"
        + table(["user", "what it is", "allowed"], app)
        + "\n"
    )

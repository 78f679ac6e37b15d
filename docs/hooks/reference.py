"""MkDocs hook: the reference pages are generated from the code at build time, so they cannot drift.

- ``api.md``: the marker ``<!-- generated: openapi -->`` becomes the app's OpenAPI schema (every endpoint, every
  request and result model with its fields, types, limits and descriptions), read from ``create_app().openapi()``.
- ``trainer/config.md``: ``<!-- generated: grpo-config -->`` becomes every ``GRPOConfig`` field with its type,
  default and the docstring under it, grouped by the section comments of ``trainer/config/`` (the option groups
  and the commands' classes);
  ``trainer/recipe.md``: ``<!-- generated: sft-config -->`` and ``<!-- generated: sample-config -->`` the same
  for ``SFTConfig`` and ``SampleConfig``.
- ``trainer/from_trl_verl.md``: ``<!-- generated: foreign-rules -->`` becomes the table of
  the rules of ``trainer/config/foreign/`` (what ``python -m trainer convert`` does with each TRL or verl option).
- ``examples/arithmetic/curves.png`` (outside ``docs/``) is added to the site for the example's page.

Everything is read from this checkout; nothing is downloaded. A page that lost its marker fails the build.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import sys
import typing
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
OPENAPI_MARKER = "<!-- generated: openapi -->"
CONFIG_MARKER = "<!-- generated: grpo-config -->"
SFT_CONFIG_MARKER = "<!-- generated: sft-config -->"
SAMPLE_CONFIG_MARKER = "<!-- generated: sample-config -->"
FOREIGN_MARKER = "<!-- generated: foreign-rules -->"
#: Files outside ``docs/`` that pages show, as (path from the repository root, path in the site).
EXTRA_FILES = [("examples/arithmetic/curves.png", "examples/arithmetic/curves.png")]


def _import_path() -> None:
    # The docs describe this checkout, not whatever copy of the packages the environment has installed.
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


def _prose(text: str) -> str:
    """Docstring text as Markdown: ``<think>`` outside code spans is text, not an HTML tag."""
    parts = re.split(r"(`+[^`]*`+)", text)
    return "".join(p if p.startswith("`") else p.replace("<", "&lt;").replace(">", "&gt;") for p in parts)


def _cell(text: Any) -> str:
    """Text safe inside one Markdown table cell."""
    return _prose(" ".join(str(text).split())).replace("|", "\\|")


# ---------------------------------------------------------------------------------------------------- OpenAPI


def _anchor(name: str) -> str:
    return f"schema-{name.lower()}"


def _type(schema: dict[str, Any]) -> str:
    """A JSON schema as a short type: ``string``, ``list[RewardItem]``, ``"ok" | "timeout"``, links to models."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{_anchor(name)})"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            parts = [_type(s) for s in schema[key]]
            return " \\| ".join(dict.fromkeys(parts))
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        if "prefixItems" in schema:
            return "[" + ", ".join(_type(s) for s in schema["prefixItems"]) + "]"
        return f"list[{_type(items)}]" if items else "list"
    if kind == "object":
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            return f"dict[string, {_type(extra)}]"
        return "object"
    if isinstance(kind, list):
        return " \\| ".join(kind)
    return kind or "any"


_LIMITS = {
    "minLength": "length ≥ {}",
    "maxLength": "length ≤ {}",
    "minimum": "≥ {}",
    "maximum": "≤ {}",
    "exclusiveMinimum": "> {}",
    "exclusiveMaximum": "< {}",
    "minItems": "items ≥ {}",
    "maxItems": "items ≤ {}",
    "pattern": "matches `{}`",
}


def _limits(schema: dict[str, Any]) -> list[str]:
    found = []
    for sub in [schema, *schema.get("anyOf", [])]:
        for key, fmt in _LIMITS.items():
            if key in sub:
                value = sub[key]
                if isinstance(value, float) and value.is_integer():
                    value = int(value)
                found.append(fmt.format(f"{value:,}" if isinstance(value, int) else value))
    return found


def _schema_section(name: str, schema: dict[str, Any]) -> list[str]:
    lines = [f"### {name} {{#{_anchor(name)}}}", ""]
    if schema.get("description"):
        lines += [_prose(schema["description"].strip()), ""]
    props = schema.get("properties")
    if not props:
        lines += [f"Type: {_type(schema)}.", ""]
        return lines
    required = set(schema.get("required", []))
    lines += ["| field | type | required | default | description |", "| --- | --- | --- | --- | --- |"]
    for field, sub in props.items():
        default = f"`{json.dumps(sub['default'])}`" if "default" in sub else ""
        desc = sub.get("description", "")
        extra = _limits(sub)
        if extra:
            desc = f"{desc} ({', '.join(extra)})" if desc else ", ".join(extra)
        if sub.get("examples"):
            desc += " Example: " + ", ".join(f"`{json.dumps(e)}`" for e in sub["examples"][:2]) + "."
        req = "yes" if field in required else ""
        lines.append(f"| `{field}` | {_type(sub)} | {req} | {_cell(default)} | {_cell(desc)} |")
    if schema.get("additionalProperties") is False:
        lines += ["", "Other fields are refused with a 422."]
    lines.append("")
    return lines


def _body_schema(content: dict[str, Any]) -> dict[str, Any] | None:
    media = content.get("application/json")
    return media.get("schema") if media else None


def render_openapi(spec: dict[str, Any]) -> str:
    """The Markdown of every endpoint and model in an OpenAPI 3 document."""
    lines = ["## Endpoints", ""]
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            lines += [f"### `{method.upper()} {path}`", ""]
            for key in ("summary", "description"):
                if op.get(key):
                    lines += [_prose(op[key].strip()), ""]
            body = op.get("requestBody")
            if body:
                schema = _body_schema(body.get("content", {}))
                if schema:
                    lines += [f"Request body (JSON): {_type(schema)}.", ""]
            lines += ["| status | meaning | body |", "| --- | --- | --- |"]
            for code, resp in op.get("responses", {}).items():
                schema = _body_schema(resp.get("content", {}))
                body_type = _type(schema) if schema else ""
                lines.append(f"| {code} | {_cell(resp.get('description', ''))} | {body_type} |")
            lines.append("")
    lines += ["## Models", ""]
    for name, schema in sorted(spec.get("components", {}).get("schemas", {}).items()):
        lines += _schema_section(name, schema)
    return "\n".join(lines)


def openapi_spec() -> dict[str, Any]:
    """The app's OpenAPI document, with the server's default settings (the build does not read ``RLVR_*``)."""
    _import_path()
    from reward_server.app import create_app
    from reward_server.settings import Settings

    # Defaults only: a developer's RLVR_* variables or .env must not change the published limits.
    defaults = Settings.model_construct()
    return create_app(defaults).openapi()


# ---------------------------------------------------------------------------------------------------- GRPOConfig


def _sections(cls: type) -> dict[str, str]:
    """Field name -> the section comment above it (``# ---- model and data``) in the source of the class, or of
    the option group (a base class, :mod:`trainer.config.groups`) that defines it."""
    out: dict[str, str] = {}
    for klass in cls.__mro__:  # the most derived first: a redeclared option sits where the command puts it
        if not dataclasses.is_dataclass(klass):
            continue
        section = ""
        for line in inspect.getsource(klass).splitlines():
            text = line.strip()
            if text.startswith("# ---"):
                section = text.lstrip("#- ").strip()
            elif ":" in text and not text.startswith(("#", '"', "def ", "@")) and text.split(":")[0].isidentifier():
                out.setdefault(text.split(":")[0], section)
    return out


def _type_name(tp: Any) -> str:
    text = str(tp) if not isinstance(tp, type) else tp.__name__
    return text.replace("typing.", "")


def render_config(class_name: str = "GRPOConfig", level: int = 2) -> str:
    """The Markdown reference of every field of a trainer config class (``GRPOConfig``, ``SFTConfig``,
    ``SampleConfig``): name, type, default, docstring, under ``level``-deep headings of its sections."""
    _import_path()
    import trainer.config

    cls = getattr(trainer.config, class_name)
    docs = trainer.config.field_docs(cls)
    hints = typing.get_type_hints(cls)
    sections = _sections(cls)
    rows: dict[str, list[str]] = {}  # section -> its table rows, sections in the order of their first field
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f"`{json.dumps(list(f.default) if isinstance(f.default, tuple) else f.default)}`"
        else:
            default = "required"
        doc = docs.get(f.name)
        if not doc:
            raise PluginError(f"{class_name}.{f.name} has no docstring under it; every option must say what it does")
        row = f"| `{f.name}` | `{_cell(_type_name(hints[f.name]))}` | {default} | {_cell(doc)} |"
        rows.setdefault(sections.get(f.name, ""), []).append(row)
    lines: list[str] = []
    for section, table in rows.items():
        title = section[:1].upper() + section[1:] or "Options"
        lines += ["", f"{'#' * level} {title}", "", "| option | type | default | what |", "| --- | --- | --- | --- |"]
        lines += table
    return "\n".join(lines).strip() + "\n"


# ---------------------------------------------------------------------------------------------------- hooks


def on_files(files: Files, config: Any) -> Files:
    for src, dest in EXTRA_FILES:
        path = ROOT / src
        if not path.is_file():
            raise PluginError(f"{src} is missing; the docs show it")
        files.append(File.generated(config, dest, abs_src_path=str(path)))
    return files


def render_foreign_rules() -> str:
    """The TRL and verl conversion rules as one Markdown table."""
    _import_path()
    from trainer.config.conversion import rules_table

    return rules_table()


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    generated = {
        "api.md": [(OPENAPI_MARKER, lambda: render_openapi(openapi_spec()))],
        "trainer/config.md": [(CONFIG_MARKER, render_config)],
        "trainer/from_trl_verl.md": [(FOREIGN_MARKER, render_foreign_rules)],
        "trainer/recipe.md": [
            (SFT_CONFIG_MARKER, lambda: render_config("SFTConfig", level=4)),
            (SAMPLE_CONFIG_MARKER, lambda: render_config("SampleConfig", level=4)),
        ],
    }
    for marker, render in generated.get(page.file.src_uri, []):
        if marker not in markdown:
            raise PluginError(
                f"docs/{page.file.src_uri} lost its marker {marker}; the reference would not be generated"
            )
        markdown = markdown.replace(marker, render())
    return markdown

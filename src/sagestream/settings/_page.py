"""The docs' table of the settings (``docs/configuration.md``): :func:`markdown_table` of the declarations, and
:func:`with_table`, a page with its table replaced."""

from __future__ import annotations

from typing import Any

from sagestream.settings._setting import READ_BY_CONFIG, Setting

# --- the docs' table ----------------------------------------------------------------------------------------

TABLE_BEGIN = "<!-- settings table: generated from src/sagestream/settings/; regenerate with "
TABLE_END = "<!-- end of the generated settings table -->"
REGENERATE = "python -m sagestream.settings docs/configuration.md"


def _code(value: Any) -> str:
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (tuple, frozenset)):
        return f"`{','.join(value)}`" if value else "none"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    return "none" if value is None else f"`{value}`"


def _value_words(s: Setting) -> str:
    if s.value_doc is not None:
        return s.value_doc
    if s.kind == "choice":
        return ", ".join(f"`{c}`" for c in s.choices)
    if s.kind in ("whole", "number"):
        noun = "whole number" if s.kind == "whole" else "number"
        return f"{noun} ≥ {s.minimum}"
    return {
        "text": "text",
        "flag": "`true` or `false`",
        "list": "comma-separated",
        "names": "comma-separated names",
        "words": "comma- or space-separated",
    }[s.kind]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(settings: tuple[Setting, ...]) -> str:
    """The docs' table of ``settings``: one row each, in their order.

    >>> ui = Setting("SERVE_UI", "flag", "serve the chat page at `/`", False, template_parameter="ServeUi")
    >>> print(markdown_table((ui,)).splitlines()[2])
    | `SERVE_UI` | `true` or `false` | `false` | `ServeUi` | serve the chat page at `/` |
    """
    rows = [
        "| variable | value | default | template parameter | meaning |",
        "| --- | --- | --- | --- | --- |",
    ]
    for s in settings:
        default = s.default_doc if s.default_doc is not None else _code(s.default)
        parameter = f"`{s.template_parameter}`" if s.template_parameter else ""
        meaning = s.meaning if s.read_by == READ_BY_CONFIG else f"{s.meaning}; read by {s.read_by}"
        cells = [f"`{s.env}`", _value_words(s), default, parameter, meaning]
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(rows) + "\n"


def with_table(page: str, settings: tuple[Setting, ...]) -> str:
    """``page`` with the text between its table markers replaced by :func:`markdown_table`."""
    import re

    match = re.search(re.escape(TABLE_BEGIN) + r".*?-->\n(.*?)" + re.escape(TABLE_END), page, flags=re.DOTALL)
    if match is None:
        raise ValueError(f"no settings table markers ({TABLE_BEGIN}... {TABLE_END}) in the page")
    return page[: match.start(1)] + markdown_table(settings) + page[match.end(1) :]

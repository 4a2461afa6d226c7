"""Every environment variable the function is configured by, declared once: :data:`SETTINGS`, assembled from the
declarations of each part (``_upstream``, ``_access``, ``_kept``, ``_guardrails``) in the order of the docs' table.

Each :class:`Setting` names its variable, its kind of value (and so how it is parsed and what is allowed),
its default, what it means, the :mod:`sagestream.config` field it fills and the ``template.yaml`` parameter
that sets it on AWS. :meth:`Config.from_env <sagestream.config.Config.from_env>` reads each one through
:meth:`Setting.parse`, then applies the rules that span several settings (in code, in ``config``);
``docs/configuration.md``'s table is :func:`markdown_table` of this declaration (``tests/unit/test_settings.py``
fails when the page differs), and ``tests/deploy`` checks the template's parameters against it.

A small table of its own rather than pydantic-settings: that package imports asyncio, ssl and argparse, about
100 ms of CPU at init, and pydantic with it (docs/configuration.md, "How the table is made"); this module imports
nothing the function does not load anyway.

Regenerate the page's table after changing a setting::

    python -m sagestream.settings docs/configuration.md

Example::

    >>> SETTING["UPSTREAM_MAX_ATTEMPTS"].parse(" 2 ")
    2
    >>> SETTING["UPSTREAM_MAX_ATTEMPTS"].parse(None)
    3
    >>> SETTING["UPSTREAM_MAX_ATTEMPTS"].parse("0")
    Traceback (most recent call last):
    ...
    sagestream.settings.ConfigError: UPSTREAM_MAX_ATTEMPTS='0' must be at least 1
    >>> SETTING["AUTH_MODE"].parse("JWT"), SETTING["JWT_AUDIENCE"].parse("api, app")
    ('jwt', ('api', 'app'))
"""

from __future__ import annotations

import sys

from sagestream.settings import _page
from sagestream.settings._access import SETTINGS as _ACCESS
from sagestream.settings._guardrails import SETTINGS as _GUARDRAILS
from sagestream.settings._kept import SETTINGS as _KEPT
from sagestream.settings._page import REGENERATE, TABLE_BEGIN, TABLE_END
from sagestream.settings._setting import AUTH_MODES, READ_BY_CONFIG, ConfigError, Kind, Setting
from sagestream.settings._upstream import SETTINGS as _UPSTREAM

__all__ = [
    "AUTH_MODES",
    "READ_BY_CONFIG",
    "REGENERATE",
    "SETTING",
    "SETTINGS",
    "TABLE_BEGIN",
    "TABLE_END",
    "ConfigError",
    "Kind",
    "Setting",
    "main",
    "markdown_table",
    "with_table",
]

# In the order of the docs' table: the upstream, the requests, the stream, access control, telemetry, guardrails.
SETTINGS: tuple[Setting, ...] = (*_UPSTREAM, *_ACCESS, *_KEPT, *_GUARDRAILS)

SETTING: dict[str, Setting] = {s.env: s for s in SETTINGS}


def markdown_table(settings: tuple[Setting, ...] = SETTINGS) -> str:
    """The docs' table of ``settings`` (all of them by default): one row each, in their order."""
    return _page.markdown_table(settings)


def with_table(page: str) -> str:
    """``page`` with the text between its table markers replaced by the table of every setting."""
    return _page.with_table(page, SETTINGS)


def main(argv: list[str]) -> int:
    """``python -m sagestream.settings PAGE`` rewrites PAGE's table; with no PAGE, prints the table."""
    if not argv:
        sys.stdout.write(markdown_table())
        return 0
    from pathlib import Path

    page = Path(argv[0])
    page.write_text(with_table(page.read_text()))
    return 0

"""The settings of Bedrock Guardrails on completions (:mod:`sagestream.guardrails`): off unless ``GUARDRAIL_ID`` is
set; each model of ``MODELS`` may set its own (its ``guardrail`` key) or turn it off (``"guardrail": false``).

Example::

    >>> {s.env: s.default for s in SETTINGS}["GUARDRAIL_WINDOW_CHARS"]
    1000
"""

from __future__ import annotations

from sagestream.settings._setting import Setting

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "GUARDRAIL_ID",
        "text",
        "a Bedrock guardrail's identifier (or ARN): every completion's prompt and answer are assessed with "
        "`ApplyGuardrail` (see [Guardrails](guardrails.md)); unset: no guardrail. A model of `MODELS` may set its "
        'own (`"guardrail": {"id": ..., "version": ..., "sides": ..., "mode": ..., "window": ..., "fail": ...}`, '
        'unset keys from these settings) or none (`"guardrail": false`)',
        template_parameter="GuardrailId",
    ),
    Setting(
        "GUARDRAIL_VERSION",
        "text",
        "`GUARDRAIL_ID`: the guardrail's version (a number, or `DRAFT`)",
        default="DRAFT",
        template_parameter="GuardrailVersion",
    ),
    Setting(
        "GUARDRAIL_SIDES",
        "choice",
        "`GUARDRAIL_ID`: what is assessed: the `prompt` (before the endpoint is called), the `output` (window by "
        "window), or `both`",
        default="both",
        template_parameter="GuardrailSides",
        choices=("prompt", "output", "both"),
    ),
    Setting(
        "GUARDRAIL_OUTPUT_MODE",
        "choice",
        "`GUARDRAIL_ID`: `async` sends each delta at once and assesses each window behind it (an intervention "
        "ends the answer within a window; nothing sent is taken back, nothing masked); `sync` holds each window "
        "until it is assessed and sends it masked (safe, but the client gets text a window at a time)",
        default="async",
        template_parameter="GuardrailOutputMode",
        choices=("async", "sync"),
    ),
    Setting(
        "GUARDRAIL_WINDOW_CHARS",
        "whole",
        "`GUARDRAIL_ID`: the characters of the answer per assessment (ApplyGuardrail bills 1,000 characters as "
        "one text unit: a smaller window costs more per token)",
        default=1000,
        template_parameter="GuardrailWindowChars",
        minimum=1,
    ),
    Setting(
        "GUARDRAIL_FAIL",
        "choice",
        "`GUARDRAIL_ID`: a guardrail that fails or does not answer in time (3 s, or the deadline): `closed` is a "
        "503 `guardrail_unavailable` in the route's shape (an error event once the answer started), `open` lets "
        "the text through (logged and counted either way)",
        default="closed",
        template_parameter="GuardrailFail",
        choices=("closed", "open"),
    ),
)

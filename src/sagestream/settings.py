"""Every environment variable the function is configured by, declared once: :data:`SETTINGS`.

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
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

from sagestream.dialects import DIALECTS, prompts
from sagestream.protocols._wire import MIN_PAD_BYTES


class ConfigError(ValueError):
    """A setting that is missing or not valid; the function refuses to start with it."""


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")
AUTH_MODES = ("iam", "api_key", "jwt", "none")

# How a variable's text becomes a value:
#   text    stripped; empty is unset (the default)
#   choice  one of ``choices``, case-insensitive
#   whole   a whole number of at least ``minimum``;  number: the same, fractions allowed
#   flag    true/false (1/0, yes/no, on/off); set but empty is false
#   list    comma-separated, blanks dropped (a tuple); names: the same as a set
#   words   separated by commas or spaces (a tuple)
Kind = Literal["text", "choice", "whole", "number", "flag", "list", "names", "words"]

READ_BY_CONFIG = "sagestream.config"


class Setting(NamedTuple):
    """One environment variable: how it is read, what it means, where it goes and where it comes from.

    A NamedTuple rather than a dataclass: its class costs init about 0.3 ms to make, a dataclass's 1.8 ms.
    """

    env: str
    kind: Kind
    meaning: str
    default: Any = None
    # The Config field it fills as parsed; None where code combines it with others (or another reader has it).
    field: str | None = None
    # The template.yaml parameter that sets it on AWS; None: the template does not, or not from a parameter.
    template_parameter: str | None = None
    minimum: int = 0
    choices: tuple[str, ...] = ()
    # A rule of this setting alone, beyond its kind: the problem with a parsed value, or None.
    check: Callable[[Any], str | None] | None = None
    # What the docs' table shows where the kind's own words would not say enough.
    default_doc: str | None = None
    value_doc: str | None = None
    # Who reads it: the function's configuration, or (declared for the docs and the template) another reader.
    read_by: str = READ_BY_CONFIG

    def parse(self, raw: str | None) -> Any:
        """The value of this setting when its variable holds ``raw`` (None: not set); :class:`ConfigError`
        naming the variable, the value and the rule it breaks."""
        if raw is None:
            return self.default
        if self.kind == "flag":
            word = raw.strip().lower()
            if word in _TRUE or word in _FALSE:
                return word in _TRUE
            raise ConfigError(f"{self.env}={raw!r} is not true or false")
        text = raw.strip()
        if self.kind in ("list", "names"):
            items = tuple(item.strip() for item in text.split(",") if item.strip())
            return frozenset(items) if self.kind == "names" else items
        if self.kind == "words":
            return tuple(text.replace(",", " ").split())
        if not text:
            return self.default
        value: Any
        if self.kind == "text":
            value = text
        elif self.kind == "choice":
            value = text.lower()
            if value not in self.choices:
                raise ConfigError(f"{self.env}={value!r}; expected one of {', '.join(self.choices)}")
        else:
            whole = self.kind == "whole"
            try:
                value = int(text) if whole else float(text)
            except ValueError:
                raise ConfigError(f"{self.env}={text!r} is not a {'whole ' if whole else ''}number") from None
            if value < self.minimum:
                raise ConfigError(f"{self.env}={text!r} must be at least {self.minimum}")
        problem = self.check(value) if self.check is not None else None
        if problem is not None:
            raise ConfigError(f"{self.env}={value!r} {problem}")
        return value


def _pad_rule(pad: int) -> str | None:
    if 0 < pad < MIN_PAD_BYTES:
        return f"must be 0 or at least {MIN_PAD_BYTES} (an SSE comment: ':', padding, a blank line)"
    return None


def _positive(seconds: float) -> str | None:
    # 0 would make the socket non-blocking, failing every call at once.
    return "must be more than 0" if seconds <= 0 else None


_LOCAL = "`true` under `make run`"

# In the order of the docs' table: the upstream, the requests, the stream, access control, telemetry.
SETTINGS: tuple[Setting, ...] = (
    Setting(
        "SAGEMAKER_ENDPOINT_NAME",
        "text",
        "the endpoint to stream from; `make run` sets `sagestream-sim`. With `MODELS` it may be left out, or must "
        "be one of its endpoints",
        field="endpoint_name",
        template_parameter="EndpointName",
        default_doc="(required without `MODELS`)",
    ),
    Setting(
        "MODELS",
        "text",
        "several models on one function: a JSON object mapping each model id to its upstream (see "
        "[Several models](#several-models)); replaces `MODEL_ID` and `INFERENCE_COMPONENT_NAME`",
        template_parameter="Models",
        value_doc="JSON object",
    ),
    Setting(
        "MODELS_PARAMETER",
        "text",
        "instead of `MODELS`: the SSM parameter (String or SecureString) holding that JSON, read once at init "
        "(Powertools Parameters)",
        template_parameter="ModelsParameter",
        value_doc="SSM parameter name",
    ),
    Setting(
        "UPSTREAM_FORMAT",
        "choice",
        "what the container emits: `openai` (TGI Messages API, vLLM, SGLang, LMI chat), `tgi` (TGI "
        "`generate_stream`), `lmi` (LMI/DJL jsonlines)",
        default="openai",
        field="dialect",
        template_parameter="UpstreamFormat",
        choices=DIALECTS,
    ),
    Setting(
        "MODEL_ID",
        "text",
        "the model name clients send and `/v1/models` lists; any other name gets 404 `model_not_found`",
        field="model_id",
        template_parameter="ModelId",
        default_doc="the endpoint name",
    ),
    Setting(
        "INFERENCE_COMPONENT_NAME",
        "text",
        "the inference component to call, on endpoints that have them",
        field="inference_component",
        template_parameter="InferenceComponentName",
    ),
    Setting(
        "TARGET_VARIANT",
        "text",
        "the production variant to call",
        field="target_variant",
        template_parameter="TargetVariant",
    ),
    Setting(
        "PREFIX_AWARE_ROUTING",
        "flag",
        "send a request's `prompt_cache_key` as SageMaker's `PrefixAwareId`, for endpoints whose routing strategy "
        "is prefix-aware ([SageMaker routing](observability.md#sagemaker-routing-and-request-correlation))",
        default=False,
        field="prefix_aware_routing",
        template_parameter="PrefixAwareRouting",
        default_doc=f"`false` ({_LOCAL} on the simulated endpoint)",
    ),
    Setting(
        "MAX_TOKENS_LIMIT",
        "whole",
        "the most `max_tokens` a request may ask for (and the default when it asks for none)",
        field="max_tokens_limit",
        template_parameter="MaxTokensLimit",
        minimum=1,
    ),
    Setting(
        "MAX_REQUEST_BYTES",
        "whole",
        "the largest request body accepted (413 above it)",
        default=1024 * 1024,
        field="max_request_bytes",
        minimum=1,
    ),
    Setting(
        "MAX_PROMPT_CHARS",
        "whole",
        "the most characters of prompt text (every message's text, or `prompt`) a request may send; 400 "
        "`prompt_too_long` above it",
        field="max_prompt_chars",
        minimum=1,
    ),
    Setting(
        "EXTRA_REQUEST_FIELDS",
        "names",
        "vendor request fields passed to the container (`top_k,min_p,repetition_penalty,chat_template_kwargs`); "
        "not OpenAI's own fields ([OpenAI compatibility](api.md#openai-compatibility)). A name the function sets "
        "or limits in the upstream body is refused at init, per dialect (`Dialect.computed_fields`): `openai` "
        "`model`, `messages`, `prompt`, `stream`, `stream_options`, `max_tokens`, `max_completion_tokens`; `tgi` (in "
        "`parameters`) `details`, `max_new_tokens`, `do_sample`, `temperature`, `top_p`, `stop`, `seed`, "
        "`frequency_penalty`, `top_n_tokens`, `grammar`; `lmi` the same with `stop_sequences` and "
        "`presence_penalty`, without `top_n_tokens` and `grammar`",
        default=frozenset(),
        field="extra_request_fields",
        template_parameter="ExtraRequestFields",
    ),
    Setting(
        "PROMPT_TEMPLATE",
        "choice",
        "how chat messages become a prompt on `tgi`/`lmi` endpoints; without it chat there is a 400 that says so",
        field="prompt_template",
        template_parameter="PromptTemplate",
        choices=tuple(prompts.names()),
    ),
    Setting(
        "SSE_PAD_BYTES",
        "whole",
        "append an SSE comment of this many bytes after each delta (see [SSE padding](#sse-padding))",
        default=0,
        field="sse_pad_bytes",
        check=_pad_rule,
        value_doc=f"`0`, or a whole number ≥ {MIN_PAD_BYTES}",
    ),
    Setting(
        "SSE_KEEPALIVE_S",
        "number",
        "after this long with nothing from the endpoint, write an SSE comment to the client, and again while it "
        "stays silent, so that fronts which cut silent streams (CloudFront's 30 s origin read timeout, an "
        "edge-optimized REST API's 30 s idle timeout) keep it open; `0` turns it off (see "
        "[Keep-alives](#keep-alives))",
        default=10.0,
        field="sse_keepalive_s",
        value_doc="seconds ≥ 0",
    ),
    Setting(
        "DEADLINE_MARGIN_MS",
        "whole",
        "stop reading this long before the Lambda deadline and end the stream (or the whole answer, with a 504) "
        "cleanly. At or above the function timeout every answer is a 504: the first invocation of each "
        "environment logs a warning saying so (Lambda tells a function its timeout nowhere at init, so the first "
        "invocation's remaining time is where it is known)",
        default=3000,
        field="deadline_margin_ms",
    ),
    Setting(
        "UPSTREAM_CONNECT_TIMEOUT_S",
        "number",
        "connect timeout to SageMaker",
        default=5.0,
        field="connect_timeout_s",
        check=_positive,
        value_doc="seconds > 0",
    ),
    Setting(
        "UPSTREAM_READ_TIMEOUT_S",
        "number",
        "read timeout (before and between PayloadParts)",
        default=60.0,
        field="read_timeout_s",
        check=_positive,
        value_doc="seconds > 0",
    ),
    Setting(
        "UPSTREAM_MAX_ATTEMPTS",
        "whole",
        "endpoint calls one request may cause, the first included (botocore standard retries, before the stream "
        "starts; see [Retries](#retries))",
        default=3,
        field="max_attempts",
        minimum=1,
    ),
    Setting(
        "COLD_WAIT_S",
        "number",
        "how long a request is held while its model has no capacity (an inference component scaled to zero), is "
        "still loading or is throttled: retried with capped exponential backoff and jitter, a stream kept open "
        "by keep-alives, within the invocation's deadline; `0` answers 503 (429 throttled) at once. A held "
        "request costs Lambda duration (see [Cold and busy endpoints](#cold-and-busy-endpoints)); `MODELS` may "
        "set it per model (`cold_wait_s`)",
        default=0.0,
        field="cold_wait_s",
        template_parameter="ColdWaitS",
        value_doc="seconds ≥ 0",
    ),
    Setting(
        "FALLBACK_COOLDOWN_S",
        "number",
        "after a target of a model with `fallbacks` answered no capacity, throttled, not ready or a 5xx, how long "
        "requests skip it for the next one (per execution environment)",
        default=30.0,
        field="fallback_cooldown_s",
        value_doc="seconds ≥ 0",
    ),
    Setting(
        "BREAKER_FAILURES",
        "whole",
        "endpoint calls in a row (the function's own retries included) that failed with a 5xx, a broken "
        "connection, a timeout, no capacity or throttling, after which a target's circuit breaker opens: its "
        "requests get a 503 `breaker_open` with `Retry-After` (or its model's fallback) without calling it, "
        "per execution environment; `0` turns the breaker off (see [Circuit breaker](#circuit-breaker))",
        default=5,
        field="breaker_failures",
    ),
    Setting(
        "BREAKER_COOLDOWN_S",
        "number",
        "how long an open breaker refuses calls before one request probes the target; each failed probe doubles it",
        default=10.0,
        field="breaker_cooldown_s",
        check=_positive,
        value_doc="seconds > 0",
    ),
    Setting(
        "BREAKER_MAX_COOLDOWN_S",
        "number",
        "the longest an open breaker's cooldown grows to",
        default=120.0,
        field="breaker_max_cooldown_s",
        check=_positive,
        value_doc="seconds > 0",
    ),
    Setting(
        "SERVE_UI",
        "flag",
        "serve the chat page at `/`",
        default=False,
        field="serve_ui",
        template_parameter="ServeUi",
        default_doc=f"`false` ({_LOCAL})",
    ),
    Setting(
        "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME",
        "text",
        "boto3's own endpoint override; `make run` points it at the simulated endpoint",
        read_by="botocore",
        value_doc="URL",
    ),
    Setting(
        "AUTH_MODE",
        "choice",
        "who may call `/v1/*` ([Access control](auth.md))",
        default="iam",
        field="auth_mode",
        template_parameter="AuthMode",
        choices=AUTH_MODES,
    ),
    Setting(
        "API_KEYS_PARAMETER",
        "text",
        "`api_key` mode: the SSM SecureString or Secrets Manager secret holding the keys",
        field="api_keys_parameter",
        template_parameter="ApiKeysParameter",
        value_doc="SSM parameter or secret name",
    ),
    Setting(
        "API_KEY_SOURCE",
        "choice",
        "`api_key` mode: who checks the key: `function` (against `API_KEYS_PARAMETER`), or `gateway` (an API "
        "Gateway REST front's keys and usage plan did; the template sets it with `Front=RestApi`)",
        default="function",
        field="api_key_source",
        choices=("function", "gateway"),
    ),
    Setting(
        "API_KEYS_MAX_AGE_S",
        "whole",
        "how long the keys read from it are cached",
        default=300,
        field="api_keys_max_age_s",
    ),
    Setting(
        "API_KEYS",
        "list",
        "local runs only: keys in the environment (implies `AUTH_MODE=api_key` under `make run`)",
        default=(),
        field="api_keys",
    ),
    Setting(
        "JWT_ISSUER",
        "text",
        "the OpenID Connect issuer whose tokens are accepted: its `iss`, `https` (`http` only on loopback); "
        "`make run AUTH_MODE=jwt` starts a local one",
        field="jwt_issuer",
        template_parameter="JwtIssuer",
        default_doc="(required in `jwt` mode)",
        value_doc="URL",
    ),
    Setting(
        "JWT_AUDIENCE",
        "words",
        "the accepted audiences: matched against `aud`, or `client_id` (Cognito access tokens)",
        default=(),
        field="jwt_audience",
        template_parameter="JwtAudience",
        default_doc="(required in `jwt` mode)",
    ),
    Setting(
        "JWT_REQUIRED_SCOPES",
        "words",
        "scopes every token must hold (`scope` or `scp`); 403 without one",
        default=(),
        field="jwt_required_scopes",
        template_parameter="JwtRequiredScopes",
    ),
    Setting(
        "JWT_JWKS_MAX_AGE_S",
        "whole",
        "how long the issuer's keys are used before they are fetched again",
        default=3600,
        field="jwt_jwks_max_age_s",
        minimum=1,
    ),
    Setting(
        "JWT_JWKS_REFETCH_S",
        "whole",
        "the least time between two key fetches (an unknown `kid`, aged keys, a failed fetch)",
        default=10,
        field="jwt_jwks_refetch_s",
    ),
    Setting(
        "JWT_PAGE_CLIENT_ID",
        "text",
        "the public OIDC client the chat page signs in with (code flow with PKCE); none: no sign-in on the page",
        field="jwt_page_client_id",
        template_parameter="JwtPageClientId",
    ),
    Setting(
        "JWT_CLIENT_ID_PARAMETER",
        "text",
        "an SSM parameter holding an app client id, added to the audiences and used as the page's client (the "
        "template sets it to its own Cognito client's, with `CreateUserPool=true`)",
        value_doc="SSM parameter name",
    ),
    Setting(
        "ALLOWED_ORIGINS",
        "list",
        "browser origins allowed by CORS, or `*`; `make run` answers the same",
        default=("*",),
        template_parameter="AllowedOrigins",
        read_by="the Function URL's CORS (locally `sagestream_local.cors`)",
    ),
    Setting(
        "QUOTAS",
        "text",
        "per-caller limits: requests and tokens per minute, tokens per day and per month, counted in "
        "`QUOTAS_TABLE`; the default limits as words (`tokens_per_minute=20000 requests_per_minute=30`) or JSON "
        "with per-group and per-caller overrides (see [Quotas](auth.md#quotas))",
        default_doc="unset: no quotas",
        template_parameter="Quotas",
    ),
    Setting(
        "QUOTAS_TABLE",
        "text",
        "`QUOTAS` set: the DynamoDB table the counts are kept in (the template makes it)",
        field="quotas_table",
    ),
    Setting(
        "QUOTAS_UNAVAILABLE",
        "choice",
        "what a request gets when DynamoDB cannot be asked about its quota: `closed` a 503 "
        "`quota_unavailable` with `Retry-After`, `open` the answer, uncounted (logged and counted either way)",
        default="closed",
        field="quotas_unavailable",
        template_parameter="QuotasUnavailable",
        choices=("closed", "open"),
    ),
    Setting(
        "RESPONSES_STORE",
        "choice",
        "where the Responses API keeps responses (`store`, `previous_response_id`, `GET /v1/responses/{id}`): "
        "`none` keeps nothing (the function is stateless and says so), `dynamodb` the table `RESPONSES_TABLE` "
        "(see [Stored responses](api.md#stored-responses))",
        default="none",
        field="responses_store",
        template_parameter="ResponsesStore",
        choices=("none", "dynamodb"),
        default_doc="`none` (`dynamodb` under `make run`)",
    ),
    Setting(
        "RESPONSES_TABLE",
        "text",
        "`RESPONSES_STORE=dynamodb`: the DynamoDB table (the template makes it)",
        field="responses_table",
    ),
    Setting(
        "RESPONSES_TTL_DAYS",
        "whole",
        "how long a stored response is kept, in days (DynamoDB's TTL deletes it later; reads stop at once)",
        default=30,
        field="responses_ttl_days",
        template_parameter="ResponsesTtlDays",
        minimum=1,
    ),
    Setting(
        "RESPONSES_RESUMABLE_STREAMS",
        "flag",
        "with a store: a stored stream's events are also kept (in batches) while it runs, so that "
        "`GET /v1/responses/{id}?stream=true&starting_after=N` can resume it from another connection "
        "(see [Background responses](api.md#background-responses-resumed-streams-and-cancel))",
        default=True,
        field="responses_resumable_streams",
    ),
    Setting(
        "RESPONSES_MAX_CHAIN",
        "whole",
        "the most responses one `previous_response_id` chain may hold; a request past it is a 400 naming "
        "`previous_response_id`",
        default=100,
        field="responses_max_chain",
        minimum=1,
    ),
    Setting(
        "LOG_PAYLOADS",
        "flag",
        "put prompts and completions in the log record",
        default=False,
        field="log_payloads",
        template_parameter="LogPayloads",
    ),
    Setting(
        "AWS_LAMBDA_MAX_CONCURRENCY",
        "whole",
        "invocations one execution environment runs at once: set by Lambda Managed Instances (the template's "
        "`PerExecutionEnvironmentMaxConcurrency`), unset on classic Lambda; `make run MAX_CONCURRENCY=K` locally",
        default=1,
        minimum=1,
        read_by="`sagestream.lambda_runtime`",
    ),
    Setting(
        "POWERTOOLS_LOG_LEVEL",
        "text",
        "log level (Powertools also reads `LOG_LEVEL`)",
        default="INFO",
        template_parameter="LogLevel",
        read_by="Powertools Logger",
    ),
    Setting(
        "POWERTOOLS_SERVICE_NAME",
        "text",
        "the `service` of log records and metrics (the template sets the stack's name)",
        default="sagestream",
        read_by="`sagestream.telemetry`",
    ),
    Setting(
        "POWERTOOLS_METRICS_NAMESPACE",
        "text",
        "CloudWatch namespace of the metrics",
        default="sagestream",
        template_parameter="MetricsNamespace",
        read_by="`sagestream.telemetry`",
    ),
    Setting(
        "POWERTOOLS_TRACE_DISABLED",
        "flag",
        "tracing is on only when this is `false` (and the function's X-Ray tracing is active: the template's "
        "`Tracing=true` sets both); off unless enabled, unlike Powertools' own default",
        default=True,
        template_parameter="Tracing",
        default_doc="`true` (tracing off)",
    ),
)

SETTING: dict[str, Setting] = {s.env: s for s in SETTINGS}


# --- the docs' table ----------------------------------------------------------------------------------------

TABLE_BEGIN = "<!-- settings table: generated from src/sagestream/settings.py; regenerate with "
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


def markdown_table(settings: tuple[Setting, ...] = SETTINGS) -> str:
    """The docs' table of ``settings``: one row each, in their order.

    >>> print(markdown_table((SETTING["SERVE_UI"],)).splitlines()[2])
    | `SERVE_UI` | `true` or `false` | `false` (`true` under `make run`) | `ServeUi` | serve the chat page at `/` |
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


def with_table(page: str) -> str:
    """``page`` with the text between its table markers replaced by :func:`markdown_table`."""
    import re

    match = re.search(re.escape(TABLE_BEGIN) + r".*?-->\n(.*?)" + re.escape(TABLE_END), page, flags=re.DOTALL)
    if match is None:
        raise ValueError(f"no settings table markers ({TABLE_BEGIN}... {TABLE_END}) in the page")
    return page[: match.start(1)] + markdown_table() + page[match.end(1) :]


def main(argv: list[str]) -> int:
    """``python -m sagestream.settings PAGE`` rewrites PAGE's table; with no PAGE, prints the table."""
    if not argv:
        sys.stdout.write(markdown_table())
        return 0
    from pathlib import Path

    page = Path(argv[0])
    page.write_text(with_table(page.read_text()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

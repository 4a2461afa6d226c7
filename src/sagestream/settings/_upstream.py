"""The settings of the upstream, the requests, the stream, and the endpoint's troubles (holds, fallbacks, the
breaker).

Example::

    >>> [s.env for s in SETTINGS][:2]
    ['SAGEMAKER_ENDPOINT_NAME', 'MODELS']
"""

from __future__ import annotations

from sagestream.dialects import DIALECTS, prompts
from sagestream.protocols._wire import MIN_PAD_BYTES
from sagestream.settings._setting import LOCAL, Setting, pad_rule, positive

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
        default_doc=f"`false` ({LOCAL} on the simulated endpoint)",
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
        check=pad_rule,
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
        check=positive,
        value_doc="seconds > 0",
    ),
    Setting(
        "UPSTREAM_READ_TIMEOUT_S",
        "number",
        "read timeout (before and between PayloadParts)",
        default=60.0,
        field="read_timeout_s",
        check=positive,
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
        "how long an open breaker refuses calls before one request probes the target; each failed probe doubles "
        "it, unless the target had no capacity or throttled (a copy starting is noticed within one)",
        default=10.0,
        field="breaker_cooldown_s",
        check=positive,
        value_doc="seconds > 0",
    ),
    Setting(
        "BREAKER_MAX_COOLDOWN_S",
        "number",
        "the longest an open breaker's cooldown grows to",
        default=120.0,
        field="breaker_max_cooldown_s",
        check=positive,
        value_doc="seconds > 0",
    ),
    Setting(
        "SERVE_UI",
        "flag",
        "serve the chat page at `/`",
        default=False,
        field="serve_ui",
        template_parameter="ServeUi",
        default_doc=f"`false` ({LOCAL})",
    ),
    Setting(
        "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME",
        "text",
        "boto3's own endpoint override; `make run` points it at the simulated endpoint",
        read_by="botocore",
        value_doc="URL",
    ),
)

"""The settings of what is kept (stored responses) and of the runtime and its telemetry.

Example::

    >>> next(s for s in SETTINGS if s.env == "RESPONSES_STORE").default
    'none'
"""

from __future__ import annotations

from sagestream.settings._setting import Setting

SETTINGS: tuple[Setting, ...] = (
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

"""The settings of access control: who may call (IAM, API keys, JWT), from which origins, and how much (quotas).

Example::

    >>> "AUTH_MODE" in {s.env for s in SETTINGS}, "QUOTAS" in {s.env for s in SETTINGS}
    (True, True)
"""

from __future__ import annotations

from sagestream.settings._setting import AUTH_MODES, Setting

SETTINGS: tuple[Setting, ...] = (
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
)

"""The whole local chain in one object: simulated endpoint → runtime processes → local Function URL.

``front="rest"`` puts a stand-in of the API Gateway REST front there instead
(:mod:`sagestream_local.rest_front`): with ``AUTH_MODE=api_key`` it holds the keys of ``API_KEYS`` as API
Gateway does, and the function trusts its check (``API_KEY_SOURCE=gateway``), as the template sets it.

``make run``, ``make invoke``, the end-to-end tests and the benchmark all start it the same way.

Which upstream the runtime processes call:

- ``AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME`` set: that URL (boto3's own override, left as it is);
- ``UPSTREAM=aws``: real SageMaker with the user's own credentials and region;
- ``UPSTREAM=vllm``: a real engine on this machine: :class:`~sagestream_local.vllm_engine.VllmEngine`
  (``vllm serve`` on loopback, the model folder ``MODEL`` or the tiny model it builds) behind a
  :class:`~sagestream_local.container_front.ContainerFront`, with ``UPSTREAM_FORMAT=openai`` and the same
  stand-in credentials as the simulated endpoint;
- otherwise (or with ``upstream="simulated"``) the embedded
  :class:`~sagestream_local.endpoint.SimulatedEndpoint`, with stand-in
  credentials and region so that no AWS configuration is needed.

With ``RESPONSES_STORE=dynamodb``, moto's DynamoDB server holds the store (unless ``AWS_ENDPOINT_URL_DYNAMODB``
names another), and so, with ``QUOTAS`` and no ``QUOTAS_TABLE``, do the quotas' counts;
:class:`~sagestream_local.lambda_invoke.LambdaInvoke` stands in for Lambda's asynchronous ``Invoke`` (unless
``AWS_ENDPOINT_URL_LAMBDA`` names another), so background responses run in the same runtime processes.

With ``GUARDRAIL_ID`` (or ``GUARDRAIL``, the words a local guardrail denies: ``make run GUARDRAIL=word,word``) and
no ``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``, the stack runs :class:`~sagestream_local.guardrail.LocalGuardrail`, the
stand-in of Bedrock's ``ApplyGuardrail``, and points the function at it.

With ``AUTH_MODE=jwt`` and no ``JWT_ISSUER``, the stack also runs a
:class:`~sagestream_local.oidc.LocalIssuer` on loopback, and points ``JWT_ISSUER``, ``JWT_AUDIENCE``,
``JWT_REQUIRED_SCOPES`` and ``JWT_PAGE_CLIENT_ID`` at it (each only where unset); the chat page's URL is its
registered redirect URI.

Example::

    >>> with LocalStack(port=0, env={"UPSTREAM_FORMAT": "tgi"}) as stack:  # doctest: +SKIP
    ...     print(stack.url, stack.endpoint.url)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from sagestream_local.container_front import ContainerFront
from sagestream_local.cors import Cors
from sagestream_local.dynamodb import LocalDynamoDB
from sagestream_local.endpoint import Scenario, SimulatedEndpoint
from sagestream_local.function_url import IDLE_TIMEOUT_S, FunctionURL
from sagestream_local.guardrail import LOCAL_GUARDRAIL_ID, LocalGuardrail, Rules
from sagestream_local.lambda_invoke import LambdaInvoke
from sagestream_local.oidc import LocalIssuer
from sagestream_local.rest_front import THROTTLE_BURST, THROTTLE_RATE, ApiGateway, UsagePlan, rest_front
from sagestream_local.runtime_api import Pool
from sagestream_local.vllm_engine import VllmEngine

SIM_ENDPOINT_NAME = "sagestream-sim"
VLLM_ENDPOINT_NAME = "sagestream-vllm"
# Stand-in credentials for the simulated endpoint: it checks that requests are signed, not by whom.
_SIM_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "AKIASAGESTREAMLOCAL0",
    "AWS_SECRET_ACCESS_KEY": "sagestream-local-not-a-secret",
    "AWS_SESSION_TOKEN": "",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
}


class LocalStack:
    def __init__(
        self,
        *,
        port: int = 3000,
        concurrency: int = 4,
        max_concurrency: int = 1,
        timeout_s: float = 300.0,
        env: Mapping[str, str] | None = None,
        scenario: Scenario | None = None,
        upstream: str | None = None,
        command: list[str] | None = None,
        verbose: bool = False,
        stdout: int | IO[Any] | None = None,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        front: str = "url",
        throttle_rate: float = THROTTLE_RATE,
        throttle_burst: int = THROTTLE_BURST,
    ) -> None:
        merged = {**os.environ, **(env or {})}
        # The Function URL's CORS answers, from the setting the template gives the deployed one.
        self.cors = Cors.from_setting(merged.get("ALLOWED_ORIGINS"))
        self.env: dict[str, str] = {"SERVE_UI": "true", **dict(env or {})}
        if merged.get("API_KEYS") and not merged.get("AUTH_MODE"):
            self.env["AUTH_MODE"] = "api_key"  # `make run API_KEYS=k1,k2`: local keys mean the keys are checked
        if front not in ("url", "rest"):
            raise ValueError(f"front {front!r}: expected url or rest")
        self.gateway: ApiGateway | None = None
        if front == "rest":
            keyed = (self.env.get("AUTH_MODE") or merged.get("AUTH_MODE") or "").lower() == "api_key"
            keys = [k.strip() for k in (merged.get("API_KEYS") or "").split(",") if k.strip()] if keyed else []
            self.gateway = ApiGateway(keys, UsagePlan(throttle_rate, throttle_burst))
            if keyed:
                self.env["API_KEY_SOURCE"] = "gateway"  # as the template sets it with Front=RestApi
        self.issuer: LocalIssuer | None = None
        if (merged.get("AUTH_MODE") or "").lower() == "jwt" and not merged.get("JWT_ISSUER"):
            self.issuer = LocalIssuer()
            self.env.setdefault("JWT_AUDIENCE", self.issuer.audience)
            self.env.setdefault("JWT_REQUIRED_SCOPES", self.issuer.scope)
            self.env.setdefault("JWT_PAGE_CLIENT_ID", self.issuer.client_id)
        # A guardrail and no Bedrock named: the stand-in, denying GUARDRAIL's words and masking e-mail addresses.
        self.guardrail: LocalGuardrail | None = None
        words = tuple(w.strip() for w in (merged.get("GUARDRAIL") or "").split(",") if w.strip())
        if words and not merged.get("GUARDRAIL_ID"):
            self.env["GUARDRAIL_ID"] = LOCAL_GUARDRAIL_ID
        guardrail_id = self.env.get("GUARDRAIL_ID") or merged.get("GUARDRAIL_ID")
        if guardrail_id and not merged.get("AWS_ENDPOINT_URL_BEDROCK_RUNTIME"):
            email = {"name": "EMAIL", "regex": r"[\w.+-]+@[\w-]+\.[\w.]+", "action": "ANONYMIZED"}
            rules = Rules(denied_words=words, pii=(email,) if words else ())
            self.guardrail = LocalGuardrail(guardrail_id, rules=rules)
        # RESPONSES_STORE=dynamodb with no DynamoDB named: the Responses API keeps its responses in moto's server.
        # QUOTAS with no table named: the counts are kept there too.
        self.dynamodb: LocalDynamoDB | None = None
        self._store_here = (merged.get("RESPONSES_STORE") or "").lower() == "dynamodb"
        self._quotas_here = bool(merged.get("QUOTAS")) and not merged.get("QUOTAS_TABLE")
        if (self._store_here or self._quotas_here) and not merged.get("AWS_ENDPOINT_URL_DYNAMODB"):
            self.dynamodb = LocalDynamoDB()
        # With a store, background responses: the function invokes itself asynchronously, here through a
        # stand-in of Lambda's Invoke that runs the event in this stack's runtime processes.
        self.lambda_invoke: LambdaInvoke | None = None
        if (merged.get("RESPONSES_STORE") or "").lower() == "dynamodb" and not merged.get("AWS_ENDPOINT_URL_LAMBDA"):
            self.lambda_invoke = LambdaInvoke()
        self.endpoint: SimulatedEndpoint | None = None
        self.engine: VllmEngine | None = None
        self.container_front: ContainerFront | None = None
        upstream = (upstream or merged.get("UPSTREAM") or "").lower()
        if upstream != "simulated" and merged.get("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME"):
            self.upstream = merged["AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME"]
        elif upstream == "aws":
            self.upstream = "aws"
        elif upstream == "vllm":
            if merged.get("UPSTREAM_FORMAT", "openai") != "openai":
                raise ValueError("UPSTREAM=vllm serves vLLM's OpenAI routes: UPSTREAM_FORMAT must be openai")
            self.engine = VllmEngine(Path(merged["MODEL"]) if merged.get("MODEL") else None)
            self.env.update(UPSTREAM_FORMAT="openai", SAGEMAKER_ENDPOINT_NAME=VLLM_ENDPOINT_NAME)
            self.env.setdefault("MODEL_ID", self.engine.model_name)
            for name, value in _SIM_CREDENTIALS.items():  # the front checks that requests are signed, not by whom
                self.env.setdefault(name, value)
            self.upstream = "vllm"
        else:
            dialect = merged.get("UPSTREAM_FORMAT", "openai")
            self.endpoint = SimulatedEndpoint(scenario or Scenario(dialect=dialect))  # type: ignore[arg-type]
            if not (merged.get("MODELS") or merged.get("MODELS_PARAMETER")):  # those name their own endpoints
                self.env.setdefault("SAGEMAKER_ENDPOINT_NAME", SIM_ENDPOINT_NAME)
            for name, value in _SIM_CREDENTIALS.items():  # a test may take them away, to see what no credentials does
                self.env.setdefault(name, value)
            self.upstream = "simulated"
        # `command` runs the runtime some other way: from a built artifact through its exec wrapper, say.
        # `max_concurrency` above 1: each environment takes that many invocations at once (Lambda Managed Instances).
        self._pool_args = {
            "size": concurrency,
            "max_concurrency": max_concurrency,
            "timeout_s": timeout_s,
            "command": command,
            "stdout": stdout,
        }
        self.pool: Pool | None = None
        self._port = port
        self._verbose = verbose
        self._idle_timeout_s = idle_timeout_s
        self.front: FunctionURL | None = None

    @property
    def url(self) -> str:
        assert self.front is not None, "start() first"
        return self.front.url

    def start(self) -> LocalStack:
        if self.dynamodb is not None:
            self.dynamodb.start()
            if self._store_here:
                self.env.update(self.dynamodb.function_env())
            if self._quotas_here:
                self.env.update(self.dynamodb.quotas_env())
            self.env.setdefault("AWS_ACCESS_KEY_ID", "local")  # moto checks no credential; botocore needs one
            self.env.setdefault("AWS_SECRET_ACCESS_KEY", "local")
            self.env["NO_PROXY"] = ",".join(filter(None, [os.environ.get("NO_PROXY"), "127.0.0.1", "localhost"]))
        if self.lambda_invoke is not None:
            self.lambda_invoke.start()
            self.env["AWS_ENDPOINT_URL_LAMBDA"] = self.lambda_invoke.url
            self.env["NO_PROXY"] = ",".join(filter(None, [os.environ.get("NO_PROXY"), "127.0.0.1", "localhost"]))
        if self.guardrail is not None:
            self.guardrail.start()
            self.env["AWS_ENDPOINT_URL_BEDROCK_RUNTIME"] = self.guardrail.url
            self.env["NO_PROXY"] = ",".join(filter(None, [os.environ.get("NO_PROXY"), "127.0.0.1", "localhost"]))
        if self.issuer is not None:  # before the runtime processes: their init fetches its keys
            self.issuer.start()
            self.env["JWT_ISSUER"] = self.issuer.url
            self.env["NO_PROXY"] = ",".join(filter(None, [os.environ.get("NO_PROXY"), "127.0.0.1", "localhost"]))
        if self.endpoint is not None:
            self.endpoint.start()
            self.env["AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME"] = self.endpoint.url
            self.env["NO_PROXY"] = ",".join(filter(None, [os.environ.get("NO_PROXY"), "127.0.0.1", "localhost"]))
            self.upstream = f"simulated endpoint at {self.endpoint.url}"
        if self.engine is not None:
            try:
                self.engine.start()
            except BaseException:
                self.stop()
                raise
            self.container_front = ContainerFront(self.engine.url).start()
            self.env["AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME"] = self.container_front.url
            self.env["NO_PROXY"] = ",".join(filter(None, [os.environ.get("NO_PROXY"), "127.0.0.1", "localhost"]))
            self.upstream = f"vllm serve at {self.engine.url} behind SageMaker's front at {self.container_front.url}"
        try:
            pool = Pool(env=self.env, **self._pool_args)  # type: ignore[arg-type]
            common = {"port": self._port, "verbose": self._verbose, "idle_timeout_s": self._idle_timeout_s}
            if self.gateway is not None:
                # The template configures no CORS on the REST API: preflights go to the function.
                self.front = rest_front(pool, self.gateway, **common)
            else:
                self.front = FunctionURL(
                    pool, interceptor=self.cors.preflight, response_headers=self.cors.headers, **common
                )
        except OSError:
            self.stop()
            raise
        if self.issuer is not None:
            self.issuer.allow_redirect(self.front.url + "/")
        self.pool = self.front.pool.start()
        if self.lambda_invoke is not None:
            self.lambda_invoke.pool = self.pool
        self.front.start()
        return self

    def stop(self) -> None:
        if self.front is not None:
            self.front.stop()
        if self.pool is not None:
            self.pool.stop()
        if self.endpoint is not None:
            self.endpoint.stop()
        if self.container_front is not None:
            self.container_front.stop()
        if self.engine is not None:
            self.engine.stop()
        if self.issuer is not None:
            self.issuer.stop()
        if self.guardrail is not None:
            self.guardrail.stop()
        if self.dynamodb is not None:
            self.dynamodb.stop()
        if self.lambda_invoke is not None:
            self.lambda_invoke.stop()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

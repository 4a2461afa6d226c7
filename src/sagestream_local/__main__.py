"""``python -m sagestream_local``: the function on a laptop, streaming, with no AWS account needed.

Example::

    $ python -m sagestream_local --port 3000
    $ curl -N http://127.0.0.1:3000/v1/chat/completions -H 'content-type: application/json' \\
        -d '{"messages": [{"role": "user", "content": "Hello"}], "stream": true}'
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from types import FrameType

from sagestream_local.function_url import IDLE_TIMEOUT_S
from sagestream_local.rest_front import THROTTLE_BURST, THROTTLE_RATE
from sagestream_local.stack import LocalStack


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sagestream_local", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=3000, help="Function URL port on 127.0.0.1 (default 3000)")
    parser.add_argument("--concurrency", type=int, default=4, help="runtime processes (default 4)")
    parser.add_argument(
        "--max-concurrency",
        type=int,
        default=1,
        help="invocations each runtime process takes at once, as Lambda Managed Instances do (default 1)",
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="function timeout in seconds (default 300)")
    parser.add_argument("--verbose", action="store_true", help="log each HTTP request")
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=IDLE_TIMEOUT_S,
        help=f"seconds a client connection may idle, or stop reading, before it is closed (default {IDLE_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--front",
        choices=("url", "rest"),
        default="url",
        help="url: a local Function URL (default); rest: a stand-in of the API Gateway REST front (Front=RestApi)",
    )
    parser.add_argument(
        "--throttle-rate",
        type=float,
        default=THROTTLE_RATE,
        help=f"--front rest with API_KEYS: requests per second per key (default {THROTTLE_RATE:g})",
    )
    parser.add_argument(
        "--throttle-burst",
        type=int,
        default=THROTTLE_BURST,
        help=f"--front rest with API_KEYS: the burst per key (default {THROTTLE_BURST})",
    )
    args = parser.parse_args(argv)
    # Signal handlers run in the main thread between two bytecodes, wherever it is: one that takes a lock
    # (Event.set, print) can wait for ever on a lock the code it interrupted holds, as a second TERM from
    # `make` did. So the handlers do nothing; the interpreter's C-level handler writes each signal's number
    # to a pipe (set_wakeup_fd), and the main thread, which only waits on that pipe, stops the stack once.
    # Any further signal is written to the pipe and ignored.
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _ignore)
    # The Responses API keeps its responses by default under make run (previous_response_id, GET), in moto's
    # DynamoDB on loopback; RESPONSES_STORE=none runs it stateless, as a deployment without a store is.
    os.environ.setdefault("RESPONSES_STORE", "dynamodb")
    stack = LocalStack(
        port=args.port,
        concurrency=args.concurrency,
        max_concurrency=args.max_concurrency,
        timeout_s=args.timeout,
        verbose=args.verbose,
        idle_timeout_s=args.idle_timeout,
        front=args.front,
        throttle_rate=args.throttle_rate,
        throttle_burst=args.throttle_burst,
    )
    if stack.upstream == "simulated" and "PREFIX_AWARE_ROUTING" not in os.environ:
        # The simulated endpoint routes by prefix (a repeated prompt_cache_key gets its first token sooner),
        # so the local run shows the effect; a real endpoint's routing strategy is its own, and stays off.
        stack.env["PREFIX_AWARE_ROUTING"] = "true"
    if stack.engine is not None:
        model_dir = stack.engine.model or "on the tiny model"
        print(f"sagestream: starting vllm serve {model_dir} (a minute or less)", flush=True)
    stack.start()
    model = stack.env.get("MODEL_ID") or stack.env.get("SAGEMAKER_ENDPOINT_NAME") or "those of MODELS"
    front = "REST API stand-in" if stack.gateway is not None else "Function URL"
    print(f"sagestream: serving {stack.url}  ({front}, model {model!r}, upstream: {stack.upstream})", flush=True)
    print(f"  chat page:  {stack.url}/", flush=True)
    if stack.endpoint is not None:
        print(f"  endpoint:   {stack.endpoint.url}/_sim/records  (what each SageMaker call carried)", flush=True)
        print(
            f"  cold:       curl -X POST {stack.endpoint.url}/_sim/scenario -d '{{\"scaled_to_zero_s\": 60}}'  "
            """(or '{"throttle_every": 3}'; run with COLD_WAIT_S=90 to hold requests meanwhile)""",
            flush=True,
        )
    if stack.env.get("QUOTAS") or os.environ.get("QUOTAS"):
        print(
            f"  quotas:     {stack.env.get('QUOTAS') or os.environ.get('QUOTAS')}  (per caller, counted in DynamoDB "
            f"table {stack.env.get('QUOTAS_TABLE') or os.environ.get('QUOTAS_TABLE')}; answers carry x-ratelimit-*)",
            flush=True,
        )
    if stack.guardrail is not None:
        print(
            f"  guardrail:  {stack.guardrail.url}  (Bedrock's ApplyGuardrail stand-in, guardrail "
            f"{stack.guardrail.identifier!r}; rules: curl -X POST {stack.guardrail.url}/_guardrail/rules "
            """-d '{"denied_words": ["zorp"]}')""",
            flush=True,
        )
    if stack.lambda_invoke is not None:
        print(
            f"  background: {stack.lambda_invoke.url}  (Lambda's async Invoke: background responses run here)",
            flush=True,
        )
    if stack.engine is not None:
        engine = stack.engine
        print(f"  engine:     {engine.model_name!r} up in {engine.start_s:.0f} s; its log: {engine.log}", flush=True)
    if stack.issuer is not None:
        users = ", ".join(f"{name} / {password}" for name, password in stack.issuer.users.items())
        print(
            f"  sign-in:    local OIDC issuer {stack.issuer.url} (users: {users}); "
            f"rotate its key: curl -X POST {stack.issuer.url}/rotate",
            flush=True,
        )
    print(
        f"  try:        curl -N {stack.url}/v1/chat/completions -H 'content-type: application/json' "
        """-d '{"messages":[{"role":"user","content":"Hello"}],"stream":true}'""",
        flush=True,
    )
    try:
        os.read(wake_read, 64)  # returns once a signal has come (PEP 475 retries the read after each)
    finally:
        stack.stop()
    print("sagestream: stopped", file=sys.stderr, flush=True)
    return 0


def _ignore(signum: int, frame: FrameType | None) -> None:
    """A handler that takes no lock: the wake-up pipe carries the signal to the main thread."""


if __name__ == "__main__":
    sys.exit(main())

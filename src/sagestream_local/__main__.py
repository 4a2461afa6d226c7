"""``python -m sagestream_local``: the function on a laptop, streaming, with no AWS account needed.

Example::

    $ python -m sagestream_local --port 3000
    $ curl -N http://127.0.0.1:3000/v1/chat/completions -H 'content-type: application/json' \\
        -d '{"messages": [{"role": "user", "content": "Hello"}], "stream": true}'
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from sagestream_local.stack import LocalStack


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sagestream_local", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=3000, help="Function URL port on 127.0.0.1 (default 3000)")
    parser.add_argument("--concurrency", type=int, default=4, help="runtime processes (default 4)")
    parser.add_argument("--timeout", type=float, default=300.0, help="function timeout in seconds (default 300)")
    parser.add_argument("--verbose", action="store_true", help="log each HTTP request")
    args = parser.parse_args(argv)
    stack = LocalStack(port=args.port, concurrency=args.concurrency, timeout_s=args.timeout, verbose=args.verbose)
    stack.start()
    model = stack.env.get("MODEL_ID") or stack.env.get("SAGEMAKER_ENDPOINT_NAME", "")
    print(f"sagestream: serving {stack.url}  (model {model!r}, upstream: {stack.upstream})", flush=True)
    print(f"  chat page:  {stack.url}/", flush=True)
    print(
        f"  try:        curl -N {stack.url}/v1/chat/completions -H 'content-type: application/json' "
        """-d '{"messages":[{"role":"user","content":"Hello"}],"stream":true}'""",
        flush=True,
    )
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    try:
        stopped.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The function as a SnapStart deployment that primes at init (``_HANDLER=tests.snapstart_app.handler``): one
call through its SageMaker client before the snapshot, as AWS suggests priming, so that the client's pool
holds a connection when the snapshot is taken. A restored environment must not use it: the connection's far
end is gone by then on AWS (tests/e2e/test_snapstart.py counts the connections the endpoint accepts)."""

from __future__ import annotations

from sagestream.app import handler

primed = handler.client.invoke_endpoint(
    EndpointName=handler.config.endpoint_name,
    Body=b'{"messages": [{"role": "user", "content": "prime"}], "max_tokens": 1}',
    ContentType="application/json",
)
primed["Body"].read()  # read to its end, so urllib3 puts the connection back in the pool

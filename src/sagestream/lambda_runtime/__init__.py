"""A Lambda Runtime API client that streams responses, standard library only.

A module per concern: ``interface`` (what a handler sees: the stream's interface, the context, the
exceptions), ``client`` (the Runtime API's calls, ``/next`` read by hand), ``stream`` (the streamed
``/response``: prelude, separator, chunks, trailers), ``loop`` (the invocation loop, one or many threads of
it, and ``main``), ``snapstart`` (SnapStart's phase of init), ``logs`` (the runtime's JSON lines, the trace
header). ``python -m sagestream.lambda_runtime`` is the entry the exec wrapper runs. A handler imports what
it sees from here:

    >>> from sagestream.lambda_runtime import ClientDisconnected, LambdaContext, ResponseStream
    >>> LambdaContext(aws_request_id="r-1", deadline_ms=0).aws_request_id
    'r-1'

Python's managed Lambda runtime returns a handler's value in one piece; a Function URL in
``RESPONSE_STREAM`` mode needs the response body sent while the handler runs. No maintained Python
library implements the streaming half of the Runtime API (awslambdaric buffers the whole response), so
this module speaks it directly, as the published Runtime API describes it:

- ``GET  /2018-06-01/runtime/invocation/next`` blocks until an event arrives (no read timeout);
- ``POST /2018-06-01/runtime/invocation/{id}/response`` with ``Lambda-Runtime-Function-Response-Mode:
  streaming`` and a chunked body: the JSON prelude as one HTTP chunk, the 8 NUL bytes as the next, then
  the body, one HTTP chunk per write; a handler that raises after the first byte has its body ended with
  the ``Lambda-Runtime-Function-Error-Type`` and ``Lambda-Runtime-Function-Error-Body`` trailers (AWS
  documents them as the way to report a failure once the response has begun, and says Lambda treats such
  a response as a success: they do not count in the ``Errors`` metric);
- a response the handler gave up on (a write that could not finish before the deadline: the caller stopped
  reading) cannot end cleanly, so its connection is aborted (a reset), which ends the invocation at once; the
  loop then goes back to ``/next`` with the execution environment intact;
- ``POST /2018-06-01/runtime/invocation/{id}/error`` for a failure before anything was written;
- ``POST /2018-06-01/runtime/init/error`` when the handler cannot be loaded, and the process exits;
- with SnapStart (``AWS_LAMBDA_INITIALIZATION_TYPE=snap-start``), after init: the before-snapshot hooks,
  ``GET /2018-06-01/runtime/restore/next`` (Lambda snapshots the environment while it waits and answers
  it in each environment restored from the snapshot), then the after-restore hooks, and only then
  ``/next``; a hook that fails is reported (``/init/error`` before the snapshot, ``/restore/error`` after a
  restore) and the process exits. The hooks are those registered with AWS's own ``snapshot_restore_py``
  (``register_before_snapshot`` / ``register_after_restore``), as in Lambda's managed Python runtime:
  before-snapshot hooks run last-registered first, after-restore hooks in the order registered. Before
  the after-restore hooks the runtime runs one of its own: Python's ``random`` reseeded from the OS, since
  every environment restored from one snapshot would otherwise draw the same numbers (``uuid4`` and
  ``secrets`` read the OS afresh each time and need nothing).

It knows nothing of SageMaker: the handler is ``handler(event, stream, context)``.

The same code runs under Lambda and under an independent emulator, cargo-lambda (``cargo lambda watch
--only-lambda-apis``), whose Runtime API differs in three allowed ways, each handled here: its address
is a URL with a path (``http://127.0.0.1:9000/.rt``), its deadline header is a duration (``600000``)
rather than an epoch time, and it answers the streamed ``/response`` POST with ``200`` before the body
ends. So the stream tells an early answer from the far side closing: an early 2xx does not end the
stream, an early error status does (logged), and EOF or a reset is the caller gone.

Environment variables read: ``AWS_LAMBDA_RUNTIME_API`` (``host:port``, or a URL with a path prefix),
``_HANDLER`` (``module.function``,
default ``sagestream.app.handler``), ``AWS_LAMBDA_INITIALIZATION_TYPE`` (``snap-start``: see above), and for
the context ``AWS_LAMBDA_FUNCTION_NAME``,
``AWS_LAMBDA_FUNCTION_VERSION``, ``AWS_LAMBDA_FUNCTION_MEMORY_SIZE``, ``AWS_LAMBDA_LOG_GROUP_NAME``,
``AWS_LAMBDA_LOG_STREAM_NAME``, and ``AWS_LAMBDA_MAX_CONCURRENCY`` (see below). Each invocation's trace
header is :func:`trace_id`; with one invocation at a time it is also ``_X_AMZN_TRACE_ID``, as Lambda sets it.

Many invocations at once (Lambda Managed Instances): when ``AWS_LAMBDA_MAX_CONCURRENCY`` is above 1, that
many threads each run the same sequential loop (:func:`run`: ``/next``, the handler, ``/response``), each
with its own ``/next`` connection, as aws-lambda-rust-runtime's concurrent runner and aws-lambda-go do.
Threads, not processes or a selector loop: a relayed stream spends almost all its life waiting on two
sockets, so the GIL is rarely contended, the handler stays the blocking code it is, and one process (one
init, one boto3 client, one 51 MB interpreter) carries them all; measured, 16-64 streams in one process
cost about half the CPU per stream-second of one stream per process (docs/deploy.md, "Many streams per
environment"). What is per invocation stays per invocation: the trace header is a context variable (the
process-wide ``_X_AMZN_TRACE_ID`` is removed, so that nothing reads another invocation's), and the
handler keeps its record, log keys and metrics per call. A handler that fails fails only its own
invocation. ``SIGTERM`` stops the process once the invocations in flight have ended (Lambda's grace
period bounds the wait; each invocation's own deadline ends it first). The runtime's own messages are
one JSON object a line on stderr, as Lambda Managed Instances require of every log line.

Example::

    $ AWS_LAMBDA_RUNTIME_API=127.0.0.1:9001 _HANDLER=tests.handlers.echo python -m sagestream.lambda_runtime
"""

from __future__ import annotations

from sagestream.lambda_runtime.client import RuntimeAPIClient, deadline_from_header, parse_address
from sagestream.lambda_runtime.interface import (
    ClientDisconnected,
    Handler,
    Invocation,
    LambdaContext,
    ResponseRefused,
    ResponseStream,
    WriteTimedOut,
)
from sagestream.lambda_runtime.logs import log, trace_id
from sagestream.lambda_runtime.loop import invoke, main, max_concurrency, run
from sagestream.lambda_runtime.stream import StreamingResponse

__all__ = [
    "ClientDisconnected",
    "Handler",
    "Invocation",
    "LambdaContext",
    "ResponseRefused",
    "ResponseStream",
    "RuntimeAPIClient",
    "StreamingResponse",
    "WriteTimedOut",
    "deadline_from_header",
    "invoke",
    "log",
    "main",
    "max_concurrency",
    "parse_address",
    "run",
    "trace_id",
]

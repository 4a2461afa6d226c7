"""A local Lambda Runtime API that runs real ``python -m sagestream.lambda_runtime`` processes and relays their streams.

Each :class:`ExecutionEnvironment` is one runtime process with a Runtime API of its own. As classic
Lambda's, it takes one invocation at a time; with ``max_concurrency`` K above 1, as Lambda Managed
Instances', it takes up to K at once: the process is started with ``AWS_LAMBDA_MAX_CONCURRENCY=K``, its
Runtime API holds up to K ``/next`` long-polls, and a timeout is not enforced by ending the process (that
would end the others; Lambda Managed Instances leave the deadline to the function). A :class:`Pool` of
environments is the function's concurrency, ``size`` times K (the Function URL front answers 429 beyond
it). A process that crashes, or passes the function timeout, is ended and replaced, and its invocations
fail as Lambda fails them. A process that dies while idle is replaced too, before its environment takes
another invocation: each ``/next`` belongs to one process (its *generation*), and one from a process that
has died is never given an event. A runtime that aborts its
``/response`` (a reset: it gave up on a client that stopped reading) ends that invocation at once
(``Runtime.ResponseAborted``) and keeps its environment, as Lambda does.

SnapStart (a runtime started with ``AWS_LAMBDA_INITIALIZATION_TYPE=snap-start``): its ``GET
/restore/next`` ends its init; the environment is then "snapshotted" and waits, as a published version's
snapshot does, until an invocation needs it, when it is "restored": the pool's ``on_restore`` runs (a test
makes the network of a restored environment there), ``/restore/next`` is answered, and the runtime's
after-restore hooks run before its first ``/next``. A failed hook's ``/restore/error`` fails the waiting
invocations as an init error does.

A response streams straight through: the Runtime API thread that reads a chunk from the runtime's
``/response`` body hands it to the invocation's :class:`Sink` in the same thread, which writes it to
the HTTP client at once. Nothing here waits for more bytes.

Example::

    >>> pool = Pool(size=1, env={"_HANDLER": "tests.handlers.echo"}).start()  # doctest: +SKIP
    >>> inv = pool.submit(event, sink)                                       # doctest: +SKIP
    >>> inv.wait(timeout=30)                                                 # doctest: +SKIP
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import itertools
import json
import logging
import os
import queue
import select
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import IO, Any, Protocol

from sagestream.function_url import Prelude, PreludeDecoder, PreludeError

API = "/2018-06-01/runtime"
_MAX_CHUNK_LINE = 1024
# Lambda gives a function's init 10 s before it gives up on the environment.
INIT_TIMEOUT_S = 10.0
_CRASH_GRACE_S = 0.5


class Sink(Protocol):
    """Where one invocation's response goes. Called from Runtime API threads, in order, at most once to end."""

    def prelude(self, prelude: Prelude) -> None: ...

    def chunk(self, data: bytes) -> None: ...

    def end(self, error: FunctionError | None) -> None: ...


@dataclass(frozen=True, slots=True)
class FunctionError:
    """How an invocation failed: a streamed trailer, an ``/error`` post, a crash or a timeout."""

    error_type: str
    payload: dict[str, Any]
    started: bool  # whether the response had begun when it failed


class ClientGone(Exception):
    """A sink raises this when its HTTP client has gone away."""


class Invocation:
    """One event on its way through an execution environment."""

    def __init__(self, event: Mapping[str, Any], sink: Sink, timeout_s: float) -> None:
        self.request_id = str(uuid.uuid4())
        self.body = json.dumps(event).encode()
        self.sink = sink
        self.timeout_s = timeout_s
        self.deadline = float("inf")  # set when a runtime takes the event
        self.dispatched = False
        self.started = False
        self.client_gone = threading.Event()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._response_socket: socket.socket | None = None
        self.error: FunctionError | None = None
        self.response_headers: dict[str, str] = {}
        self.environment: ExecutionEnvironment | None = None
        self.generation = -1  # which of its environment's processes took it
        # Called once the invocation has ended, before its client hears: the pool frees its place.
        self.on_finish: Callable[[Invocation], None] | None = None

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def finish(self, error: FunctionError | None) -> bool:
        """End the invocation once; later calls (a crash after a clean end, say) do nothing."""
        with self._lock:
            if self._done.is_set():
                return False
            self.error = error
            self._done.set()
        if self.environment is not None:  # recorded before the client hears, so a test can look at once
            self.environment.last_error = error
            self.environment.last_response_headers = self.response_headers
        if self.on_finish is not None:
            self.on_finish(self)
        with contextlib.suppress(ClientGone):
            self.sink.end(error)
        return True

    def attach_response(self, sock: socket.socket) -> None:
        with self._lock:
            self._response_socket = sock
        if self.client_gone.is_set():
            self._drop_response()

    def response_abandoned(self) -> bool:
        """Whether the runtime reset its ``/response`` connection before the body ended, the client still
        there: it gave up on the response (a client that stopped reading), and the invocation is over.

        A reset, not a close: a process that dies closes the connection with a FIN (nothing was ever sent to
        it there to leave unread), and that is the exit watcher's to report as a crash.
        """
        with self._lock:
            sock = self._response_socket
        return sock is not None and not self.done and not self.client_gone.is_set() and _peer_reset(sock)

    def leave(self) -> None:
        """The HTTP client went away: close the runtime's response connection, so its writes fail."""
        self.client_gone.set()
        self._drop_response()

    def _drop_response(self) -> None:
        with self._lock:
            sock = self._response_socket
        if sock is not None:
            with contextlib.suppress(OSError):
                # Closed with a reset, not a FIN: a runtime blocked sending into a full window (its client
                # stopped reading) would otherwise wait on zero-window probes to a closed socket for a minute.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.shutdown(socket.SHUT_RDWR)


class QuietServer(ThreadingHTTPServer):
    """A local server for which a client resetting its connection (an idle keep-alive one, most often) is normal
    life: noted at debug level, never a traceback on stderr."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError):
            logging.getLogger(__name__).debug("client %s: %r", client_address, error)
            return
        super().handle_error(request, client_address)


class NoDelayHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 on a TCP_NODELAY socket, answering with one ``sendall`` (invariant 2).

    The base of both local servers that a token crosses: the Runtime API and the Function URL front.
    """

    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _answer(self, status: int, body: bytes = b"", headers: Mapping[str, str] | None = None) -> None:
        head = [f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}", f"Content-Length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.connection.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)


class _RuntimeAPIHandler(NoDelayHandler):
    server: _RuntimeAPIServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def do_GET(self) -> None:
        env = self.server.environment
        if self.path == f"{API}/restore/next":
            if env.restore_when_needed(self.connection):
                self._answer(200)
            else:
                self.close_connection = True
            return
        if self.path != f"{API}/invocation/next":
            self._answer(404, b'{"errorMessage":"not found"}')
            return
        inv = env.next_invocation(self.connection)
        if inv is None:  # shutting down, or this /next came from a process that has since died
            self.close_connection = True
            with contextlib.suppress(OSError):
                self._answer(500, b'{"errorMessage":"shutting down"}')
            return
        self._answer(
            200,
            inv.body,
            {
                "Content-Type": "application/json",
                "Lambda-Runtime-Aws-Request-Id": inv.request_id,
                "Lambda-Runtime-Deadline-Ms": str(int(inv.deadline * 1000)),
                "Lambda-Runtime-Invoked-Function-Arn": env.function_arn,
                "Lambda-Runtime-Trace-Id": f"Root=1-{int(time.time()):08x}-{uuid.uuid4().hex[:24]};Sampled=0",
            },
        )

    def do_POST(self) -> None:
        env = self.server.environment
        if self.path in (f"{API}/init/error", f"{API}/restore/error"):
            env.init_error(
                json.loads(self._read_body() or b"{}"), self.headers.get("Lambda-Runtime-Function-Error-Type")
            )
            self._answer(202, b'{"status":"OK"}')
            return
        parts = self.path.removeprefix(f"{API}/invocation/").split("/")
        inv = env.in_flight.get(parts[0]) if len(parts) == 2 else None
        if inv is None or inv.done:
            self._read_body()
            self._answer(400, b'{"errorMessage":"unknown or finished request id"}')
            return
        if parts[1] == "error":
            payload = json.loads(self._read_body() or b"{}")
            error_type = self.headers.get("Lambda-Runtime-Function-Error-Type") or payload.get("errorType", "Unhandled")
            inv.finish(FunctionError(error_type, payload, started=False))
            self._answer(202, b'{"status":"OK"}')
        elif parts[1] == "response":
            self._relay(inv)
        else:
            self._answer(404, b'{"errorMessage":"not found"}')

    def _relay(self, inv: Invocation) -> None:
        """Pass each chunk of a streamed response to the sink the moment it has arrived."""
        inv.response_headers = {k.lower(): v for k, v in self.headers.items()}
        inv.attach_response(self.connection)
        streaming = "chunked" in (self.headers.get("Transfer-Encoding") or "").lower()
        decoder = PreludeDecoder()
        forwarding = True
        trailers: dict[str, str] = {}

        def deliver(data: bytes) -> None:
            nonlocal forwarding
            if not forwarding or not data:
                return
            try:
                if not inv.started:
                    prelude = decoder.feed(data)
                    if prelude is None:
                        return
                    inv.started = True
                    inv.sink.prelude(prelude)
                    data = decoder.rest
                if data:
                    inv.sink.chunk(data)
            except ClientGone:
                forwarding = False
                inv.leave()

        try:
            if streaming:
                trailers = self._read_chunks(deliver)
            else:
                deliver(self._read_body())
        except (OSError, ValueError, PreludeError) as e:
            # A response cut off is most often its process dying: give the exit watcher a moment to say so,
            # unless the cause is known here (the client left and we dropped it; a prelude refused).
            if inv.client_gone.is_set():
                inv.finish(FunctionError("Runtime.ClientGone", {"errorMessage": "client disconnected"}, inv.started))
            elif isinstance(e, ConnectionResetError) and e.errno == errno.ECONNRESET:
                # The runtime aborted its response (see Invocation.response_abandoned): no crash to wait for.
                inv.finish(FunctionError("Runtime.ResponseAborted", {"errorMessage": str(e)}, started=inv.started))
            elif isinstance(e, PreludeError) or (code := self.server.environment.wait_for_exit(2.0)) is None:
                inv.finish(FunctionError("Runtime.ResponseAborted", {"errorMessage": str(e)}, started=inv.started))
            else:
                inv.finish(self.server.environment.exit_error(inv, code))
            self.close_connection = True
            return
        if inv.client_gone.is_set():
            inv.finish(FunctionError("Runtime.ClientGone", {"errorMessage": "client disconnected"}, inv.started))
            self.close_connection = True
            return
        error_type = trailers.get("lambda-runtime-function-error-type")
        if error_type:
            try:
                payload = json.loads(base64.b64decode(trailers.get("lambda-runtime-function-error-body", "")))
            except (binascii.Error, ValueError):
                payload = {"errorMessage": "undecodable error body"}
            inv.finish(FunctionError(error_type, payload, started=inv.started))
        elif not inv.started:
            inv.finish(FunctionError("Runtime.InvalidResponse", {"errorMessage": "no prelude"}, started=False))
        else:
            inv.finish(None)
        self._answer(202, b'{"status":"OK"}')

    def _read_chunks(self, deliver: Any) -> dict[str, str]:
        # http.server leaves a request body to its handler, and this one must go on chunk by chunk as each
        # arrives (a parser owning the connection, h11, would take the socket from http.server). The only
        # sender is sagestream.lambda_runtime; tests/protocol/test_runtime.py pins its bytes, and any framing
        # error ends the invocation as a broken response (ValueError, OSError), never a hang.
        rfile = self.rfile
        while True:
            line = rfile.readline(_MAX_CHUNK_LINE)
            if not line:
                raise ConnectionResetError("response connection closed mid-body")
            size = int(line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                break
            data = rfile.read(size)
            if len(data) < size or rfile.read(2) != b"\r\n":
                raise ConnectionResetError("response connection closed mid-chunk")
            deliver(data)
        trailers: dict[str, str] = {}
        while (line := rfile.readline(65536)) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            trailers[name.strip().lower()] = value.strip()
        return trailers


class _RuntimeAPIServer(ThreadingHTTPServer):
    daemon_threads = True
    # An environment with K invocation loops (--max-concurrency) opens up to K connections at once, each
    # stream's /response starting together; socketserver's backlog of 5 would drop the SYNs of the rest,
    # and each would wait a whole second for its retry before its first byte.
    request_queue_size = 256
    environment: ExecutionEnvironment


class ExecutionEnvironment:
    """One runtime process at a time and the Runtime API it polls."""

    def __init__(self, pool: Pool, number: int) -> None:
        self.pool = pool
        self.number = number
        self.function_arn = f"arn:aws:lambda:{pool.region}:123456789012:function:{pool.function_name}"
        self.server = _RuntimeAPIServer(("127.0.0.1", 0), _RuntimeAPIHandler)
        self.server.environment = self
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        # Its invocations, submitted and not yet ended (waiting for a /next, or running), by request id.
        self.in_flight: dict[str, Invocation] = {}
        self.process: subprocess.Popen[bytes] | None = None
        # Counts the processes this environment has run; a /next carries the count of the one it came from.
        self.generation = 0
        self._reached_next = False  # whether the current process has asked for an invocation yet
        self._failed_inits = 0
        self._waiting: deque[Invocation] = deque()  # submitted, not yet taken by a /next
        self.init_errors = 0
        self.last_init_error: dict[str, Any] | None = None
        # What the last invocation left, for tests and for `make invoke` to report.
        self.last_error: FunctionError | None = None
        self.last_response_headers: dict[str, str] = {}
        self.exit_codes: list[int] = []
        self.snapshots = 0  # SnapStart: inits that ended in /restore/next
        self.restores = 0  # and the restores that answered it
        self._stopping = False
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)

    @property
    def current(self) -> Invocation | None:
        """The invocation submitted last of those not yet ended (with one at a time: the one)."""
        return next(reversed(self.in_flight.values()), None)

    def start(self) -> ExecutionEnvironment:
        threading.Thread(target=self.server.serve_forever, name=f"runtime-api-{self.number}", daemon=True).start()
        self._spawn()
        return self

    def _spawn(self) -> None:
        env = {**os.environ, **self.pool.env, "AWS_LAMBDA_RUNTIME_API": self.address}
        env.setdefault("AWS_LAMBDA_LOG_STREAM_NAME", f"local/{self.number}/{uuid.uuid4().hex[:8]}")
        with self._lock:
            if self._stopping:
                return
            process = subprocess.Popen(self.pool.command, env=env, stdin=subprocess.DEVNULL, stdout=self.pool.stdout)
            self.process = process
        threading.Thread(target=self._watch, args=(process,), name=f"runtime-watch-{self.number}", daemon=True).start()

    def _watch(self, process: subprocess.Popen[bytes]) -> None:
        code = process.wait()
        with self._changed:
            self.exit_codes.append(code)
            dead = self.generation
            # From here on, a /next from the dead process (one still waiting, or one read only now) gets nothing.
            self.generation += 1
            reached_next, self._reached_next = self._reached_next, False
            self._changed.notify_all()
            if self._stopping:
                return
            invocations = list(self.in_flight.values())
        running = [inv for inv in invocations if inv.dispatched and inv.generation == dead and not inv.done]
        # What the process sent before it died may still sit unread in its response connections: let the
        # Runtime API threads relay it (and end those invocations themselves) before calling the crash a failure.
        grace_ends = time.monotonic() + _CRASH_GRACE_S
        for inv in running:
            inv.wait(max(0.0, grace_ends - time.monotonic()))
            if not inv.done:
                inv.finish(self.exit_error(inv, code))
        if not reached_next:
            # It died in its init with invocations waiting for it: Lambda fails those with the init's error.
            # (Ones waiting for a process that died idle, after asking for work, cost nobody anything: the
            # next process takes them.)
            for inv in invocations:
                if not inv.dispatched and not inv.done:
                    inv.finish(self.exit_error(inv, code))
        if reached_next:
            self._failed_inits = 0
        else:
            self._failed_inits += 1
            time.sleep(min(5.0, 0.1 * 2**self._failed_inits))  # don't spin on a handler that cannot load
        self._spawn()

    def exit_error(self, inv: Invocation, code: int) -> FunctionError:
        """How Lambda reports an invocation whose process ended under it."""
        if inv.dispatched and time.time() >= inv.deadline:
            error_type, message = "Sandbox.Timedout", "Task timed out"
        elif self.last_init_error is not None:
            error_type, message = "Runtime.InitError", str(self.last_init_error.get("errorMessage"))
        else:
            error_type, message = "Runtime.ExitError", f"Runtime exited with status {code}"
        return FunctionError(error_type, {"errorMessage": message}, started=inv.started)

    def wait_for_exit(self, timeout: float) -> int | None:
        with self._lock:
            process = self.process
        try:
            return process.wait(timeout) if process is not None else None
        except subprocess.TimeoutExpired:
            return None

    def init_error(self, payload: dict[str, Any], error_type: str | None) -> None:
        self.init_errors += 1
        self.last_init_error = {"errorType": error_type, **payload}
        print(f"sagestream_local: init error in runtime {self.number}: {payload}", file=sys.stderr)

    def restore_when_needed(self, connection: socket.socket) -> bool:
        """``/restore/next``: the snapshot is taken now; the restore comes when an invocation waits for this
        environment (False: the pool stopped, or the process died, first)."""
        with self._changed:
            generation = self.generation
            self.snapshots += 1
            while not self._stopping and generation == self.generation and not self._waiting:
                self._changed.wait(0.5)
                if _peer_closed(connection):
                    return False
            if self._stopping or generation != self.generation:
                return False
        if self.pool.on_restore is not None:
            self.pool.on_restore(self)
        with self._changed:
            self.restores += 1
        return True

    def next_invocation(self, connection: socket.socket) -> Invocation | None:
        """The next event for the process on ``connection``; None once that process is gone (or on stop)."""
        with self._changed:
            generation = self.generation
            self._reached_next = True
            while not self._stopping and generation == self.generation:
                while self._waiting and self._waiting[0].done:  # failed while it waited here
                    self._waiting.popleft()
                if not self._waiting:
                    self._changed.wait(0.5)
                    continue
                if _peer_closed(connection):
                    # Its process died after asking (the exit watcher may not know yet): leave the event
                    # for the process that replaces it.
                    return None
                inv = self._waiting.popleft()
                self.init_errors, self.last_init_error = 0, None
                inv.deadline, inv.dispatched, inv.generation = time.time() + inv.timeout_s, True, generation
                return inv
        return None

    def submit(self, inv: Invocation) -> None:
        with self._changed:
            self.in_flight[inv.request_id] = inv
            self._waiting.append(inv)
            self._changed.notify_all()

    def release(self, inv: Invocation) -> None:
        with self._changed:
            self.in_flight.pop(inv.request_id, None)

    def kill(self) -> None:
        with self._lock:
            process = self.process
        if process is not None and process.poll() is None:
            process.kill()

    def stop(self) -> None:
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        self.kill()
        self.server.shutdown()
        self.server.server_close()


def _peer_reset(sock: socket.socket) -> bool:
    """Whether the other end of ``sock`` has reset it (RST), without reading.

    The socket's pending error, not a peek: a reset that comes while body bytes wait unread (the thread that
    reads them is blocked writing to a stalled client) shows to a read only after those bytes.
    """
    try:
        return sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == errno.ECONNRESET
    except OSError:
        return False  # the socket is closed on our side: not the runtime's doing


def _peer_closed(sock: socket.socket) -> bool:
    """Whether the other end of ``sock`` has closed it (a process that died closes all its sockets)."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True


class Pool:
    """The function's concurrency: ``size`` execution environments, ``max_concurrency`` invocations each at a time."""

    def __init__(
        self,
        size: int = 4,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 300.0,
        command: list[str] | None = None,
        function_name: str = "sagestream-local",
        region: str = "us-east-1",
        stdout: int | IO[Any] | None = None,
        max_concurrency: int = 1,
        on_restore: Callable[[ExecutionEnvironment], None] | None = None,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, not {max_concurrency}")
        self.size = size
        self.max_concurrency = max_concurrency
        self.stdout = stdout  # where the runtime processes' stdout goes (their logs, EMF); None: inherited
        self.on_restore = on_restore  # SnapStart: what happens to an environment as it is restored
        self.timeout_s = timeout_s
        self.function_name = function_name
        self.region = region
        self.command = command or [sys.executable, "-m", "sagestream.lambda_runtime"]
        self.env = {
            "AWS_LAMBDA_FUNCTION_NAME": function_name,
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{function_name}",
            "AWS_REGION": region,
            "AWS_DEFAULT_REGION": region,
            "PYTHONUNBUFFERED": "1",
            # Lambda Managed Instances set it for every runtime; classic Lambda never does.
            **({"AWS_LAMBDA_MAX_CONCURRENCY": str(max_concurrency)} if max_concurrency > 1 else {}),
            **(env or {}),
        }
        self.environments: list[ExecutionEnvironment] = []
        self._idle: queue.Queue[ExecutionEnvironment] = queue.Queue()
        self.invocations = 0  # events handed to an environment, for tests that show a request never got here
        self._numbers = itertools.count()

    def start(self) -> Pool:
        for _ in range(self.size):
            environment = ExecutionEnvironment(self, next(self._numbers)).start()
            self.environments.append(environment)
            for _ in range(self.max_concurrency):  # one place per invocation it may run at once
                self._idle.put(environment)
        return self

    def submit(self, event: Mapping[str, Any], sink: Sink, wait_s: float | None = None) -> Invocation:
        """Hand an event to the next free environment, waiting up to ``wait_s`` for one (None: for ever).

        Raises :class:`queue.Empty` when none came free in time: every environment is busy, which the
        Function URL front answers with Lambda's 429.
        """
        environment = self._idle.get(timeout=wait_s)
        inv = Invocation(event, sink, self.timeout_s)
        inv.environment = environment
        inv.on_finish = self._release
        self.invocations += 1
        environment.submit(inv)
        threading.Thread(target=self._supervise, args=(environment, inv), daemon=True).start()
        return inv

    def _release(self, inv: Invocation) -> None:
        # Free before the client hears its end, so a client that sends its next request the moment it has
        # the last byte finds the environment free (a process still busy with it takes the next in turn).
        environment = inv.environment
        assert environment is not None
        environment.release(inv)
        self._idle.put(environment)

    def _supervise(self, environment: ExecutionEnvironment, inv: Invocation) -> None:
        # The timeout runs from the moment the runtime takes the event, as Lambda's does; init has its own.
        submitted = time.time()
        while not inv.wait(0.05):
            if inv.response_abandoned():
                # The runtime aborted its response (it gave up on a client that stopped reading) and lives on:
                # as Lambda does, the invocation ends here, the environment stays warm. The Runtime API thread
                # may still be blocked writing to that client; the front cuts it once the end is pending.
                inv.finish(
                    FunctionError(
                        "Runtime.ResponseAborted",
                        {"errorMessage": "the runtime aborted the response before its end"},
                        started=inv.started,
                    )
                )
                return
            now = time.time()
            if inv.dispatched and now >= inv.deadline:
                if self.max_concurrency > 1:
                    return  # Lambda Managed Instances leave the timeout to the function: its deadline ends it
                environment.kill()  # the watcher fails the invocation as timed out and starts a new process
                if not inv.wait(10):
                    inv.finish(FunctionError("Sandbox.Timedout", {"errorMessage": "Task timed out"}, inv.started))
                return
            if not inv.dispatched and now - submitted > INIT_TIMEOUT_S:
                inv.finish(FunctionError("Sandbox.Timedout", {"errorMessage": "Init timed out"}, started=False))
                environment.kill()  # a process that never asked for work in time is replaced
                return

    def stop(self) -> None:
        for environment in self.environments:
            environment.stop()

    def __enter__(self) -> Pool:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""The simulated endpoint's HTTP server on 127.0.0.1: SageMaker Runtime's two operations and ``/_sim``.

It answers

- ``POST /endpoints/{name}/invocations-response-stream``: ``application/vnd.amazon.eventstream`` frames,
  one ``PayloadPart`` per model event (or per split piece), each frame one socket send at its scheduled time;
- ``POST /endpoints/{name}/invocations``: the whole model answer as one JSON body;
- ``/_sim/scenario`` (``GET``; ``POST`` a partial JSON update; ``DELETE`` resets) and ``/_sim/records``
  (``GET``; ``DELETE`` clears them and the prefix cache), so other processes (browser test, benchmark) can
  steer and observe it.

A request is checked as a real endpoint checks it, and faulted as the scenario says
(:mod:`~sagestream_local.endpoint.faults`), before anything is generated. Prefix-aware routing is simulated
as its effect: a call whose ``PrefixAwareId`` an earlier call already brought finds its prefix in the (one)
instance's KV cache and its first token comes after ``Scenario.prefix_hit_ttft_ms`` instead of ``ttft_ms``
(``null``: no such effect); the record says ``prefix_hit``. The endpoint remembers the last
:data:`PREFIX_CACHE_IDS` ids, as a cache evicts.

Example::

    >>> import json, urllib.request
    >>> from sagestream_local.endpoint.scenario import Scenario
    >>> with SimulatedEndpoint(Scenario(ttft_ms=0, cadence_ms=0)) as sim:
    ...     change = urllib.request.Request(sim.url + "/_sim/scenario", data=b'{"dialect": "lmi"}', method="POST")
    ...     with urllib.request.urlopen(change) as response:
    ...         answer = json.load(response)
    ...     now = sim.scenario.dialect
    >>> answer["dialect"], now
    ('lmi', 'lmi')
"""

from __future__ import annotations

import ipaddress
import json
import re
import select
import socket
import struct
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any, NoReturn
from urllib.parse import unquote

from sagestream_local.endpoint.answers import ModelEvent, stream_events, whole_answer
from sagestream_local.endpoint.eventstream import EVENTSTREAM_CONTENT_TYPE, payload_part_frame
from sagestream_local.endpoint.faults import (
    ServiceError,
    auth_error,
    container_error,
    context_length_error,
    model_error,
    no_capacity_error,
    not_found_message,
    service_error,
    stream_fault_frame,
)
from sagestream_local.endpoint.generation import generate
from sagestream_local.endpoint.payload_parts import Piece, pieces
from sagestream_local.endpoint.records import Outcome, Record, TokenSend
from sagestream_local.endpoint.scenario import Scenario
from sagestream_local.runtime_api import QuietServer

# How many PrefixAwareIds the simulated instance keeps the prefixes of (its KV cache, least recently used out).
PREFIX_CACHE_IDS = 1024


class _Server(QuietServer):
    daemon_threads = True
    allow_reuse_address = False
    # One environment with K invocation loops calls the endpoint K times at once, over new connections;
    # socketserver's backlog of 5 would hold the rest back a second each (their SYNs dropped, then retried).
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], endpoint: SimulatedEndpoint) -> None:
        self.endpoint = endpoint
        self.stopping = threading.Event()
        self.aborted: set[socket.socket] = set()
        super().__init__(address, _Handler)

    def shutdown_request(self, request: Any) -> None:
        if request in self.aborted:
            # no shutdown(SHUT_WR): a FIN first would turn the reset into an orderly close
            self.aborted.discard(request)
            request.close()
            return
        super().shutdown_request(request)


class _ClientGone(Exception):
    """The client went away (or the server is stopping); ``outcome`` says which."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome)
        self.outcome: Outcome = outcome


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # TCP_NODELAY: one frame, one send, on the wire now
    server: _Server
    _headers_buffer: list[bytes]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # --- routing

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    def _route(self, method: str) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path.split("?", 1)[0]
        sim = self.server.endpoint
        if path.startswith("/_sim/"):
            self._control(method, path, body)
            return
        match = re.fullmatch(r"/endpoints/([^/]+)/(invocations|invocations-response-stream)", path)
        if method != "POST" or not match:
            err = ServiceError(404, "UnknownOperationException", {"message": None})
            self._send_json(err.status, err.body, err.headers())
            return
        streaming = match[2] == "invocations-response-stream"
        try:
            request = json.loads(body) if body else None
        except ValueError:
            request = None
        record = Record(
            id=str(uuid.uuid4()),
            operation="InvokeEndpointWithResponseStream" if streaming else "InvokeEndpoint",
            endpoint=unquote(match[1]),
            target_variant=self.headers.get("X-Amzn-SageMaker-Target-Variant"),
            inference_component=self.headers.get("X-Amzn-SageMaker-Inference-Component"),
            content_type=self.headers.get("Content-Type"),
            # botocore sends the streaming operation's Accept member as X-Amzn-SageMaker-Accept
            accept=self.headers.get("X-Amzn-SageMaker-Accept" if streaming else "Accept"),
            body=body,
            request=request,
            scenario=sim.scenario,
            received_monotonic_ns=time.monotonic_ns(),
            received_wall_ns=time.time_ns(),
            inference_id=self.headers.get("X-Amzn-SageMaker-Inference-Id"),
            prefix_aware_id=self.headers.get("X-Amzn-SageMaker-Prefix-Aware-Id"),
            session_id=self.headers.get("X-Amzn-SageMaker-Session-Id"),
        )
        record.prefix_hit = record.prefix_aware_id is not None and sim._prefix_seen(record.prefix_aware_id)
        hit_ttft = record.scenario.prefix_hit_ttft_ms
        record.ttft_ms = hit_ttft if record.prefix_hit and hit_ttft is not None else record.scenario.ttft_ms
        sim._add(record)
        try:
            self._invoke(record, streaming)
        except _ClientGone as gone:
            record.outcome = gone.outcome
            self.close_connection = True
        finally:
            if record.outcome == "streaming":
                record.outcome = "completed"
            record.ended_monotonic_ns = time.monotonic_ns()
            record.ended_wall_ns = time.time_ns()
            sim._changed()

    def _control(self, method: str, path: str, body: bytes) -> None:
        sim = self.server.endpoint
        if path == "/_sim/scenario" and method in ("GET", "POST", "DELETE"):
            try:
                if method == "POST":
                    changes = json.loads(body or b"{}")
                    if not isinstance(changes, dict):
                        raise ValueError("a JSON object of scenario fields is expected")
                    sim.set_scenario(**changes)
                elif method == "DELETE":
                    sim.reset_scenario()
            except (ValueError, TypeError) as exc:
                self._send_json(400, {"message": str(exc)})
                return
            self._send_json(200, sim.scenario.to_json())
        elif path == "/_sim/records" and method in ("GET", "DELETE"):
            if method == "DELETE":
                sim.clear_records()
            self._send_json(200, [r.to_json() for r in sim.records])
        else:
            self._send_json(404, {"message": f"no {method} {path}"})

    # --- the two operations

    def _invoke(self, record: Record, streaming: bool) -> None:
        scenario = record.scenario
        error = auth_error(self.headers)
        if error is None and scenario.endpoint_names is not None and record.endpoint not in scenario.endpoint_names:
            error = ServiceError(400, "ValidationError", {"message": not_found_message(record.endpoint)})
        variant = record.target_variant or scenario.variant
        record.invoked_variant = variant
        if error is None and self.server.endpoint._scaled_to_zero(record):
            record.fault = "no_capacity"
            error = no_capacity_error()
        if error is None and self.server.endpoint._throttled(scenario):
            record.fault = "throttling"
            error = service_error("throttling", record.endpoint, variant)
        if error is None and (scenario.fault.startswith("http_") or scenario.fault == "throttling"):
            record.fault = scenario.fault
            error = service_error(scenario.fault, record.endpoint, variant)
        content_type = (record.content_type or "application/json").split(";")[0].strip().lower()
        if error is None and content_type != "application/json":
            error = model_error(415, f"unsupported content type {record.content_type}", record.endpoint, variant)
        if error is None and (refusal := container_error(record.request, scenario)):
            error = model_error(refusal[0], json.dumps({"error": refusal[1]}), record.endpoint, variant)
        if error is None and (too_long := context_length_error(record.request, scenario)):
            error = model_error(too_long[0], too_long[1], record.endpoint, variant)
        if error is not None:
            record.status = error.status
            self._send_json(error.status, error.body, error.headers())
            return
        if streaming:
            self._stream(record, variant)
        else:
            self._whole(record, variant)

    def _whole(self, record: Record, variant: str) -> None:
        scenario = record.scenario
        gen = generate(record.request, scenario)
        # a non-streaming container answers once the whole generation is done
        done_at = _slot_ns(record, gen.steps - 1)
        if scenario.fault in ("reset", "stall"):
            record.fault = scenario.fault
            self._wait_until(_slot_ns(record, 0))
            if scenario.fault == "reset":
                self._reset()
            self._wait_until(None)  # stall: until the client goes
        self._wait_until(done_at)
        body, content_type = whole_answer(record.request, scenario, record.id)
        record.status = 200
        self._send_json(200, None, {"Content-Type": content_type, "X-Amzn-Invoked-Production-Variant": variant}, body)

    def _stream(self, record: Record, variant: str) -> None:
        scenario = record.scenario
        events = stream_events(record.request, scenario, record.id)
        model_type = "application/jsonlines" if scenario.dialect == "lmi" else "text/event-stream"
        if record.request.get("stream") is not True:
            model_type = "application/json"
        chunked = scenario.framing == "chunked"
        self.send_response(200)
        self.send_header("x-amzn-RequestId", record.id)
        self.send_header("Content-Type", EVENTSTREAM_CONTENT_TYPE)
        self.send_header("X-Amzn-Invoked-Production-Variant", variant)
        self.send_header("X-Amzn-SageMaker-Content-Type", model_type)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        record.status = 200
        self._send_raw(self._headers_buffer_bytes())

        after = scenario.fault_after
        faulty = scenario.fault != "none"  # HTTP-status faults were answered before this point
        for n, piece in enumerate(pieces(events, scenario.split, scenario.coalesce)):
            self._wait_until(_slot_ns(record, piece.slot))
            if faulty and (
                (after == 0 and n == 0) or any(e.token is not None and e.token >= after for e in piece.starts)
            ):
                self._fault(record, piece)
                break
            self._send_frame(payload_part_frame(piece.data), chunked, record, piece.starts)
        else:
            if faulty:  # fewer tokens than fault_after: the fault ends the stream
                self._fault(record, None)
        if chunked:
            self._send_raw(b"0\r\n\r\n")

    def _fault(self, record: Record, piece: Piece | None) -> None:
        """Inject the scenario's stream fault in place of ``piece``; reset and stall never return."""
        fault = record.scenario.fault
        chunked = record.scenario.framing == "chunked"
        record.fault = fault
        frame = stream_fault_frame(fault, piece.data if piece is not None else None)
        if frame is not None:
            self._send_frame(frame, chunked, record, ())
        elif fault == "reset":
            self._reset()
        elif fault == "stall":
            self._wait_until(None)

    # --- socket work

    def _headers_buffer_bytes(self) -> bytes:
        # end_headers() would write through wfile; taking the buffer keeps "one write, one send" visible here
        self._headers_buffer.append(b"\r\n")
        data = b"".join(self._headers_buffer)
        self._headers_buffer = []
        return data

    def _send_frame(self, frame: bytes, chunked: bool, record: Record, starts: tuple[ModelEvent, ...]) -> None:
        data = b"%x\r\n%s\r\n" % (len(frame), frame) if chunked else frame
        mono, wall = time.monotonic_ns(), time.time_ns()
        self._send_raw(data)
        for event in starts:
            assert event.token is not None
            record.tokens.append(TokenSend(event.token, event.text, event.special, mono, wall))
        self.server.endpoint._changed()

    def _send_raw(self, data: bytes) -> None:
        try:
            self.connection.sendall(data)
        except OSError as exc:  # BrokenPipe, ConnectionReset: the client is gone
            raise _ClientGone("client_closed") from exc

    def _reset(self) -> NoReturn:
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.server.aborted.add(self.connection)
        raise _ClientGone("reset")

    def _wait_until(self, deadline_ns: int | None) -> None:
        """Sleep until ``deadline_ns`` (None: forever) while watching for the client leaving."""
        watch = True
        while True:
            if self.server.stopping.is_set():
                raise _ClientGone("server_stopped")
            now = time.monotonic_ns()
            if deadline_ns is not None and now >= deadline_ns:
                return
            step = 0.05 if deadline_ns is None else min(0.05, (deadline_ns - now) / 1e9)
            if not watch:
                time.sleep(step)
                continue
            readable, _, _ = select.select([self.connection], [], [], step)
            if readable:
                try:
                    peeked = self.connection.recv(1, socket.MSG_PEEK)
                except OSError as exc:
                    raise _ClientGone("client_closed") from exc
                if not peeked:
                    raise _ClientGone("client_closed")
                watch = False  # a pipelined request, not a goodbye: stop polling a socket that stays readable

    def _send_json(
        self, status: int, obj: Any, headers: Mapping[str, str] | None = None, raw: bytes | None = None
    ) -> None:
        body = raw if raw is not None else json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
        headers = {"Content-Type": "application/json", **(headers or {})}
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self._send_raw(self._headers_buffer_bytes() + body)


def _slot_ns(record: Record, slot: int) -> int:
    return record.received_monotonic_ns + int((record.ttft_ms + slot * record.scenario.cadence_ms) * 1e6)


class SimulatedEndpoint:
    """The simulated endpoint: a threaded HTTP server on 127.0.0.1, one thread per connection.

    ``records`` keeps the last ``record_limit`` requests, oldest first.
    """

    def __init__(
        self,
        scenario: Scenario | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        record_limit: int = 1000,
    ) -> None:
        if not ipaddress.ip_address(host).is_loopback or ipaddress.ip_address(host).version != 4:
            raise ValueError(f"the simulated endpoint binds 127.0.0.1 only, not {host}")
        self._initial = scenario or Scenario()
        self._scenario = self._initial
        self._records: deque[Record] = deque(maxlen=record_limit)
        self._prefixes: OrderedDict[str, None] = OrderedDict()  # PrefixAwareIds seen, least recent first
        self._changes = threading.Condition()
        # Capacity: until when calls find no copy running (scaled_to_zero_s), and the calls counted for throttle_every.
        self._cold_until = time.monotonic() + self._initial.scaled_to_zero_s
        self._calls_counted = 0
        self._server = _Server((host, port), self)
        self._thread: threading.Thread | None = None

    # --- lifecycle

    def start(self) -> SimulatedEndpoint:
        # a short poll interval so stop() returns promptly
        serve = self._server.serve_forever
        self._thread = threading.Thread(target=serve, args=(0.05,), name="sim-endpoint", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.stopping.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> SimulatedEndpoint:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    # --- scenario

    @property
    def scenario(self) -> Scenario:
        return self._scenario

    def set_scenario(self, **changes: Any) -> Scenario:
        """Replace the scenario for requests that arrive from now on; in-flight streams keep theirs.

        ``scaled_to_zero_s`` counts from now; ``throttle_every`` counts calls from now."""
        self._scenario = self._scenario.replace(**changes)
        self._capacity_from_now(self._scenario, changes)
        return self._scenario

    def reset_scenario(self) -> Scenario:
        """Back to the scenario given at construction."""
        self._scenario = self._initial
        self._capacity_from_now(self._scenario, {"scaled_to_zero_s": 0, "throttle_every": 0})
        return self._scenario

    def _capacity_from_now(self, scenario: Scenario, changes: Mapping[str, Any]) -> None:
        with self._changes:
            if "scaled_to_zero_s" in changes:
                self._cold_until = time.monotonic() + scenario.scaled_to_zero_s
            if "throttle_every" in changes:
                self._calls_counted = 0

    def _scaled_to_zero(self, record: Record) -> bool:
        """Whether this call finds no copy running: within ``scaled_to_zero_s``, to a named target (or any)."""
        names = record.scenario.scaled_to_zero_names
        named = names is None or record.endpoint in names or record.inference_component in names
        return named and time.monotonic() < self._cold_until

    def _throttled(self, scenario: Scenario) -> bool:
        """Whether this call is the ``throttle_every``-th since it was set (each call counted once)."""
        if not scenario.throttle_every:
            return False
        with self._changes:
            self._calls_counted += 1
            return self._calls_counted % scenario.throttle_every == 0

    # --- records

    @property
    def records(self) -> list[Record]:
        with self._changes:
            return list(self._records)

    def clear_records(self) -> None:
        """Forget every record, and every prefix cached: the next call with any PrefixAwareId is a miss."""
        with self._changes:
            self._records.clear()
            self._prefixes.clear()

    def _prefix_seen(self, prefix_aware_id: str) -> bool:
        """Whether an earlier call brought ``prefix_aware_id`` (its prefix is cached); remember it either way."""
        with self._changes:
            seen = prefix_aware_id in self._prefixes
            self._prefixes[prefix_aware_id] = None
            self._prefixes.move_to_end(prefix_aware_id)
            while len(self._prefixes) > PREFIX_CACHE_IDS:
                self._prefixes.popitem(last=False)
            return seen

    def wait_for_record(self, predicate: Callable[[Record], bool], timeout: float = 5.0) -> Record:
        """The newest record satisfying ``predicate``, waiting up to ``timeout`` seconds for one to appear."""
        deadline = time.monotonic() + timeout
        with self._changes:
            while True:
                for record in reversed(self._records):
                    if predicate(record):
                        return record
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("no record matched within the timeout")
                self._changes.wait(remaining)

    def _add(self, record: Record) -> None:
        with self._changes:
            self._records.append(record)
            self._changes.notify_all()

    def _changed(self) -> None:
        with self._changes:
            self._changes.notify_all()

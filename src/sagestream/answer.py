"""A completion's answer, whole or streamed, from the model's first upstream with capacity.

A streamed answer is :func:`sagestream.relay.relay` over :func:`sagestream.upstream.open_stream`'s
PayloadParts; this module only writes what it yields (the :class:`~sagestream.http.Writer` starts the response
with the first chunk and writes each one) and notes each delta on the invocation's
:class:`~sagestream.record.StreamRecord`. Until the first chunk a failure still gets its own HTTP status;
after it, it travels as one SSE error event and the stream ends without ``[DONE]``.

With a guardrail (``GUARDRAIL_ID``: :mod:`sagestream.guardrails`), both kinds first have the prompt assessed
(:func:`prompt_refusal`: an intervention is the answer, in the route's own shape, and the endpoint is not called),
and a streamed answer's deltas pass the :class:`~sagestream.guardrails.OutputStage` between the dialect's
decoder and the client's encoder, in the one relay loop; a whole answer is assessed once, whole.

Both kinds wait for capacity the same way (:func:`first_answer`, over :mod:`sagestream.capacity`): a held
stream writes SSE keep-alive comments meanwhile (:class:`KeepAlives`), a whole answer writes nothing.

Example::

    >>> TARGET_HEADER
    'x-sagestream-target'
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from sagestream import capacity, faults, upstream
from sagestream.delta import Delta
from sagestream.dialects import DecodeError, UpstreamStreamError, dialect_named
from sagestream.errors import APIError
from sagestream.http import JSON_HEADERS, SSE_HEADERS
from sagestream.record import GuardrailNote
from sagestream.relay import KEEPALIVE, KEEPALIVE_EVENT, relay

if TYPE_CHECKING:
    from sagestream import guardrails
    from sagestream.call import Call
    from sagestream.config import Config, GuardrailPolicy
    from sagestream.protocols import Completion, Parsed
    from sagestream.record import StreamRecord

__all__ = [
    "TARGET_HEADER",
    "KeepAlives",
    "finish",
    "first_answer",
    "guardrail_of",
    "invoke",
    "prompt_refusal",
    "stream",
    "whole",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")
# The response header naming the upstream that served a model with fallbacks (the log record's `target`).
TARGET_HEADER = "x-sagestream-target"


def whole(
    client: Any, call: Call, c: Completion, *, deadline: float, guard: guardrails.Guardrails | None = None
) -> Delta:
    """The answer in one body, as the completion's API (or its route) writes it, and what the route keeps of it."""
    parsed = c.parsed
    policy = guardrail_of(c, guard)
    refused = prompt_refusal(guard, policy, call, c, deadline=deadline) if guard and policy else None
    if refused is None:
        answer = invoke(client, call, c.cfg, parsed, c.payload, deadline=deadline)
        if guard is not None and policy is not None and policy.output:
            answer = _assessed_whole(guard, policy, call, answer, deadline=deadline)
    else:
        answer = refused
    if not answer.finish_reason:
        answer = msgspec.structs.replace(answer, finish_reason="stop")  # keeps tool calls, reasoning, logprobs
    data = c.whole_body(answer)
    call.record.wrote(answer, b"")  # a whole answer has no first delta or cadence
    if refused is not None:
        call.record.output_deltas = 0  # the guardrail's message: nothing was generated, nor is charged
    call.writer.write(data, 200, {**JSON_HEADERS, **parsed.headers})
    finish(call, parsed, data)
    return answer


def invoke(client: Any, call: Call, cfg: Config, parsed: Parsed, payload: bytes, *, deadline: float) -> Delta:
    """A whole (non-streamed) answer to ``payload``, as one delta; a fault as the client's error.

    Held while the model has no capacity as a stream is, with nothing written meanwhile (a whole answer has
    no keep-alive): a client that leaves is not noticed before the deadline or ``cold_wait_s``."""
    try:
        body = first_answer(
            call,
            cfg,
            lambda target: upstream.invoke(client, target, payload, deadline=deadline, ids=call.ids),
            deadline=deadline,
            wait=time.sleep,
        )
        return dialect_named(cfg.dialect).decode_body(body, parsed.request)
    except (DecodeError, UpstreamStreamError) as exc:
        raise faults.error_from(exc) from exc


def guardrail_of(c: Completion, guard: guardrails.Guardrails | None) -> GuardrailPolicy | None:
    """The model's guardrail for this completion: None without one, and for a count (``count_tokens``: a body of
    its own, no answer generated)."""
    if guard is None or c.cfg.guardrail is None or c.body is not None:
        return None
    return c.cfg.guardrail


def prompt_refusal(
    guard: guardrails.Guardrails, policy: GuardrailPolicy, call: Call, c: Completion, *, deadline: float
) -> Delta | None:
    """The prompt assessed (where the guardrail's sides include it), before the endpoint is called: the answer
    to write instead when the guardrail intervened, None to go on. A guardrail that fails: the route's 503
    (failing closed) or on (open)."""
    note = call.record.guardrail = GuardrailNote()
    if not policy.prompt:
        return None
    from sagestream import guardrails  # with a guardrail only: its imports are no other deployment's init

    text = guardrails.prompt_text(c.parsed.request)
    started = time.monotonic()
    try:
        verdict = guard.assess(policy, text, "INPUT", deadline=deadline)
    except guardrails.GuardrailError as exc:
        guardrails.failed(note, policy, exc, "prompt")
        return None
    finally:
        note.prompt_ms = round((time.monotonic() - started) * 1000, 3)
    return guardrails.refusal(verdict) if guardrails.counted(note, verdict, text, "prompt") else None


def _assessed_whole(
    guard: guardrails.Guardrails, policy: GuardrailPolicy, call: Call, answer: Delta, *, deadline: float
) -> Delta:
    """A whole answer's text assessed in one call: blocked, the refusal; masked, the masked text."""
    from sagestream import guardrails

    note = call.record.guardrail or GuardrailNote()
    call.record.guardrail = note
    if not answer.content:
        return answer
    try:
        verdict = guard.assess(policy, answer.content, "OUTPUT", deadline=deadline)
    except guardrails.GuardrailError as exc:
        guardrails.failed(note, policy, exc, "answer")
        return answer
    if not guardrails.counted(note, verdict, answer.content, "answer"):
        return answer
    if verdict.blocked or not verdict.text:
        return msgspec.structs.replace(guardrails.refusal(verdict), usage=answer.usage)
    return msgspec.structs.replace(answer, content=verdict.text, logprobs=None)


def _refused_stream(call: Call, c: Completion, refusal: Delta, headers: dict[str, str]) -> None:
    """A prompt the guardrail refused, as a stream in the route's protocol: the refusal, then the normal end."""
    encoder = call.encoder = c.api.encoder(c.parsed, c.cfg)
    try:
        data = encoder.encode(refusal)
        call.writer.write(data, 200, headers)
        call.record.wrote(refusal, data)
        call.record.output_deltas = 0  # the guardrail's message: nothing was generated, nor is charged
        call.writer.write(encoder.done(), 200, headers)
        finish(call, c.parsed, getattr(encoder, "final", None))
    finally:
        ended = getattr(encoder, "ended", None)
        if ended is not None:
            call.after.append(ended)


def stream(
    client: Any, call: Call, c: Completion, *, deadline: float, guard: guardrails.Guardrails | None = None
) -> None:
    """Open the upstream stream and write each delta the moment it is decoded.

    The encoder is the sink's edge: the client's protocol, and for a Responses run also its event log
    (:class:`~sagestream.protocols.responses.background.RunEncoder`), which may ask the stream to stop
    (``stopped``: its run was cancelled) and to wake at least every ``wake_s`` to see that. What the encoder
    keeps (``ended``: its log's last events, the run's state) and what the route keeps of the answer
    (``finish``: the stored response) run once the response is closed (:attr:`Call.after`): no write to
    another service stands between two deltas or before the answer's end."""
    record, writer = call.record, call.writer
    cfg, parsed, payload = c.cfg, c.parsed, c.payload
    policy = guardrail_of(c, guard)
    if guard is not None and policy is not None:
        refused = prompt_refusal(guard, policy, call, c, deadline=deadline)
        if refused is not None:
            _refused_stream(call, c, refused, {**SSE_HEADERS, **parsed.headers})
            return
    # Made first: a request held for capacity may have started the response with keep-alives, and a fault
    # after them is this encoder's error event.
    encoder = call.encoder = c.api.encoder(parsed, cfg)
    wake_s = getattr(encoder, "wake_s", None)
    keepalive_s = cfg.sse_keepalive_s if wake_s is None else min(cfg.sse_keepalive_s, wake_s)
    headers = {**SSE_HEADERS, **parsed.headers}
    try:
        parts = first_answer(
            call,
            cfg,
            lambda target: upstream.open_stream(
                client, target, payload, deadline=deadline, ids=call.ids, keepalive_s=keepalive_s
            ),
            deadline=deadline,
            wait=KeepAlives(call, headers, cfg.sse_keepalive_s),
        )
        # Closed at once however the loop ends (a client gone raises out of the write): the endpoint stops
        # generating for nobody.
        with parts:
            decoder: Any = dialect_named(cfg.dialect).stream_decoder(parsed.request)
            timed: Iterable[bytes] = _timed(parts, record)
            if guard is not None and policy is not None and policy.output:
                # The guardrail's stage, between the decoder and the encoder: the one loop carries it.
                from sagestream import guardrails

                note = record.guardrail or GuardrailNote()
                record.guardrail = note
                decoder = guardrails.OutputStage(decoder, guard, policy, note, deadline=deadline)
                timed = guardrails.with_end(timed, decoder)
            for item, data in relay(timed, decoder, encoder):
                if isinstance(item, APIError):
                    record.fail(item)
                    logger.warning("stream ended by an upstream failure: %s", item.message)
                writer.write(data, 200, headers)
                if isinstance(item, Delta):
                    # Timed here, at the edge: from the read that completed the delta to its write.
                    record.wrote(item, data, read_at=parts.read_at)
                elif item is KEEPALIVE:
                    record.keepalives += 1
                if wake_s is not None and encoder.stopped:  # type: ignore[attr-defined]
                    logger.info("the run was cancelled: its upstream stream is closed")
                    break
        # The Responses encoder's last whole response object (none after a failure): kept once it was sent.
        finish(call, parsed, getattr(encoder, "final", None))
    finally:
        # After the stored answer (a continuation that finds the run ended finds the answer stored).
        ended = getattr(encoder, "ended", None)
        if ended is not None:
            call.after.append(ended)


def first_answer(
    call: Call, cfg: Config, ask: Callable[[Config], T], *, deadline: float, wait: Callable[[float], None]
) -> T:
    """``ask``'s answer from the model's first upstream that has capacity (:mod:`sagestream.capacity`: its
    fallbacks in order, held up to its ``cold_wait_s``); the record told which served and how long it waited."""
    held = capacity.Held()
    try:
        return capacity.first_answer(ask, cfg.upstreams, held, deadline=deadline, wait=wait)
    finally:
        record = call.record
        if cfg.fallbacks and held.target is not None:
            # Where there was a choice: the record names the target, and so does the response, unless it
            # started already (a held stream's keep-alives).
            record.target, record.fallback = held.target, held.fallback
            call.writer.extra_headers[TARGET_HEADER] = held.target
        if held.rounds:
            record.cold_wait_rounds, record.cold_wait_ms = held.rounds, held.waited_s * 1000
        # A probe that was answered (half_open), or a refusal a fallback answered: the error path told the record
        # the rest (sagestream.breaker).
        record.breaker = record.breaker or held.breaker


def finish(call: Call, parsed: Parsed, answer: bytes | None) -> None:
    """What the route keeps of the answer (stored responses), once the client has it whole: run after the
    response is closed (:attr:`Call.after`), so a slow store never holds the answer's end."""
    if parsed.finish is None or answer is None:
        return
    keep = parsed.finish

    def kept() -> None:
        try:
            keep(answer)
            call.record.stored = True
        except Exception:
            call.record.stored = False
            logger.exception("keeping the answer failed")

    call.after.append(kept)


class KeepAlives:
    """The wait of a stream held for capacity: an SSE keep-alive comment every ``every_s`` of it, as for an
    endpoint's silence, so that a front which cuts silent streams keeps it, and a client that left is noticed
    (the write raises :class:`~sagestream.lambda_runtime.ClientDisconnected`, which ends the hold). ``every_s``
    0: no comments. The first comment starts the response (200): a fault after it is the protocol's error event."""

    def __init__(self, call: Call, headers: dict[str, str], every_s: float) -> None:
        self.call, self.headers, self.every_s = call, headers, every_s
        self.due: float | None = None  # when the next comment is due; counted from the first wait

    def __call__(self, seconds: float) -> None:
        now = time.monotonic()
        end = now + seconds
        if not self.every_s:
            time.sleep(seconds)
            return
        if self.due is None:
            self.due = now + self.every_s
        while now < end:
            if now >= self.due:
                self.call.writer.write(KEEPALIVE_EVENT, 200, self.headers)
                self.call.record.keepalives += 1
                self.due = now + self.every_s
            time.sleep(max(0.0, min(end, self.due) - now))
            now = time.monotonic()


def _timed(parts: Iterable[bytes], record: StreamRecord) -> Iterator[bytes]:
    """The parts, noting on the record when the first one arrived."""
    for part in parts:
        if record.upstream_first_byte is None:
            record.upstream_first_byte = time.monotonic()
        yield part

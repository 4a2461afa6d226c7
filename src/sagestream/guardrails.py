"""Bedrock Guardrails on a completion: ``ApplyGuardrail`` on the prompt before the endpoint is called, and on the
answer window by window as it streams (issue 56).

:class:`Guardrails` holds the ``bedrock-runtime`` client and a small pool of worker threads, both made at init
(never on a request: making a client parses its service model, tens of milliseconds holding the GIL). Every call
runs on a worker and the caller waits for it at most :func:`~sagestream.storage.bound` of its deadline (3 s at
most, whatever the deadline), in total, not per socket read, as :mod:`sagestream.storage` bounds DynamoDB's.

:meth:`Guardrails.assess` is one call: a :class:`Verdict` (``NONE`` or ``GUARDRAIL_INTERVENED``; whether any policy
*blocked*, rather than only masked; the outputs' text: the guardrail's blocked message, or the masked text; the
assessments' reasons for the log; the text units billed), or :class:`GuardrailError` for a guardrail that failed,
did not answer in time or answered something that is not ``ApplyGuardrail``'s answer.

:class:`OutputStage` is the answer's stage (:func:`sagestream.answer.stream` puts it between the dialect's decoder
and the client's encoder, in the one relay loop): ``async`` lets each delta through at once and assesses each full
window on a worker; an intervention (a flag read between two deltas: no I/O on the token path) ends the answer with
``finish_reason: "content_filter"`` and the blocked message; ``sync`` holds each window until it is assessed and
releases it masked.

Environment variables read: none (the settings are :mod:`sagestream.config`'s ``guardrail``); botocore reads
``AWS_ENDPOINT_URL_BEDROCK_RUNTIME`` (the local stand-in, :mod:`sagestream_local.guardrail`).

Example::

    >>> verdict_of({"action": "GUARDRAIL_INTERVENED", "outputs": [{"text": "Sorry."}], "assessments": [
    ...     {"wordPolicy": {"customWords": [{"match": "zorp", "action": "BLOCKED", "detected": True}]}}],
    ...     "usage": {"wordPolicyUnits": 1}})
    Verdict(intervened=True, blocked=True, text='Sorry.', reasons=('word zorp: BLOCKED',), units=1)
    >>> verdict_of({"action": "MAYBE"})
    Traceback (most recent call last):
    ...
    sagestream.guardrails.GuardrailError: ApplyGuardrail answered action 'MAYBE'
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from sagestream.delta import Delta
from sagestream.errors import APIError
from sagestream.storage import bound

if TYPE_CHECKING:
    from sagestream.config import GuardrailPolicy
    from sagestream.dialects import StreamDecoder
    from sagestream.record import GuardrailNote

__all__ = [
    "CALL_CAP_S",
    "GuardrailError",
    "Guardrails",
    "OutputStage",
    "Verdict",
    "make_client",
    "prompt_text",
    "refusal",
    "unavailable",
    "verdict_of",
    "with_end",
]

logger = logging.getLogger(__name__)

# The longest one ApplyGuardrail call may take, whatever the deadline (Bedrock answers in tens of milliseconds).
CALL_CAP_S = 3.0
CONNECT_TIMEOUT_S = 1.0
READ_TIMEOUT_S = 2.5
# Said when the guardrail only masked a prompt (sagestream does not rewrite prompts) or masked text already sent.
MASKED_MESSAGE = "Sorry, the guardrail does not allow this content."
UNITS_CHARS = 1000  # one text unit: ApplyGuardrail bills text by 1,000 characters


# What :func:`with_end` adds after the upstream's last part, for :class:`OutputStage` alone: a data line no
# container sends (it begins with a NUL character).
END_RECORD = "\x00sagestream: the upstream ended"
_END_PART = b"\n\ndata: " + END_RECORD.encode() + b"\n\n"


class GuardrailError(Exception):
    """The guardrail could not be asked: it failed, did not answer in time, or answered garbage."""


class Verdict(NamedTuple):
    """One assessment: whether the guardrail intervened and whether it blocked (or only masked), the text its
    outputs carry (the blocked message, or the masked text), why (for the log), and the text units billed."""

    intervened: bool
    blocked: bool
    text: str
    reasons: tuple[str, ...]
    units: int


def make_client() -> Any:
    """The process's ``bedrock-runtime`` client: call at init. botocore's retries stay (a throttled call is asked
    again), all inside the caller's bound."""
    import botocore.config
    import botocore.session

    config = botocore.config.Config(
        connect_timeout=CONNECT_TIMEOUT_S,
        read_timeout=READ_TIMEOUT_S,
        retries={"mode": "standard", "total_max_attempts": 2},
        max_pool_connections=16,
    )
    return botocore.session.get_session().create_client("bedrock-runtime", config=config)


class Guardrails:
    """The client and the workers every assessment runs on (``client``: a test's, pointed at its stand-in)."""

    def __init__(self, client: Any = None, *, workers: int = 8, cap_s: float = CALL_CAP_S) -> None:
        self.client = make_client() if client is None else client
        self.cap_s = cap_s
        self._workers = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="guardrail")

    def forget_connections(self) -> None:
        """Close the client's pooled connections (SnapStart's restore: those made before the snapshot lead
        nowhere), so that each next call opens a fresh one."""
        self.client._endpoint.http_session.close()  # botocore's URLLib3Session: clears its urllib3 pools

    def submit(self, policy: GuardrailPolicy, text: str, source: str) -> Future[Verdict]:
        """One assessment started on a worker; its answer is :meth:`result`'s."""
        return self._workers.submit(_ask, self.client, policy, text, source)

    def result(self, future: Future[Verdict], *, deadline: float | None, started: float | None = None) -> Verdict:
        """``future``'s verdict, waited for until :func:`bound` of ``deadline`` from ``started`` (now by
        default); :class:`GuardrailError` when it failed or is late (then abandoned to its worker, whose socket
        timeouts end it)."""
        left = bound(deadline, now=started, cap_s=self.cap_s) - time.monotonic()
        try:
            return future.result(timeout=max(left, 0.0))
        except FutureTimeout:
            future.cancel()
            raise GuardrailError(f"ApplyGuardrail did not answer within {self.cap_s:.1f} s or the deadline") from None

    def assess(self, policy: GuardrailPolicy, text: str, source: str, *, deadline: float | None) -> Verdict:
        """One assessment of ``text`` (``source``: ``INPUT`` or ``OUTPUT``), bounded in total."""
        started = time.monotonic()
        return self.result(self.submit(policy, text, source), deadline=deadline, started=started)


def _ask(client: Any, policy: GuardrailPolicy, text: str, source: str) -> Verdict:
    """One call, on a worker: its answer read, every failure as :class:`GuardrailError`."""
    try:
        answer = client.apply_guardrail(
            guardrailIdentifier=policy.identifier,
            guardrailVersion=policy.version,
            source=source,
            content=[{"text": {"text": text}}],
        )
    except Exception as exc:  # botocore's ClientError, a connection or read failure, an unreadable answer
        raise GuardrailError(f"ApplyGuardrail failed: {exc}") from exc
    return verdict_of(answer)


def verdict_of(answer: Any) -> Verdict:
    """ApplyGuardrail's answer read; :class:`GuardrailError` for anything else."""
    if not isinstance(answer, dict):
        raise GuardrailError("ApplyGuardrail answered something that is not an object")
    action = answer.get("action")
    if action not in ("NONE", "GUARDRAIL_INTERVENED"):
        raise GuardrailError(f"ApplyGuardrail answered action {action!r}")
    try:
        outputs = answer.get("outputs") or []
        text = "".join(str(o.get("text") or "") for o in outputs)
        reasons: list[str] = []
        blocked = False
        for assessment in answer.get("assessments") or []:
            for reason, taken in _reasons(assessment):
                reasons.append(f"{reason}: {taken}")
                blocked = blocked or taken == "BLOCKED"
        usage = answer.get("usage") or {}
        units = max((int(v) for k, v in usage.items() if k.endswith("PolicyUnits")), default=0)
    except (AttributeError, TypeError, ValueError) as exc:
        raise GuardrailError(f"ApplyGuardrail's answer is not readable: {exc}") from None
    intervened = action == "GUARDRAIL_INTERVENED"
    # An intervention that names no masking is a block (a denied topic, a content filter, a word).
    blocked = intervened and (blocked or not any(r.endswith(": ANONYMIZED") for r in reasons))
    return Verdict(intervened, blocked, text if intervened else "", tuple(reasons), units)


def _reasons(assessment: dict[str, Any]) -> Iterable[tuple[str, str]]:
    """``(what, action)`` for each finding an assessment detected and acted on."""
    lists = (
        ("topicPolicy", "topics", "topic", "name"),
        ("contentPolicy", "filters", "content", "type"),
        ("wordPolicy", "customWords", "word", "match"),
        ("wordPolicy", "managedWordLists", "managed word", "type"),
        ("sensitiveInformationPolicy", "piiEntities", "pii", "type"),
        ("sensitiveInformationPolicy", "regexes", "regex", "name"),
        ("contextualGroundingPolicy", "filters", "grounding", "type"),
    )
    for policy, key, what, name in lists:
        for finding in (assessment.get(policy) or {}).get(key) or []:
            action = finding.get("action") or "NONE"
            if action != "NONE":
                yield f"{what} {finding.get(name)}", action


def prompt_text(request: Any) -> str:
    """The text of a chat-shaped request's prompt, as the guardrail assesses it: every message's text (a client
    writes the whole conversation, the assistant's turns included), or the completion's prompt."""
    messages = getattr(request, "messages", None)
    if messages is not None:
        return "\n".join(m.text for m in messages if m.text)
    prompt = getattr(request, "prompt", "")
    return prompt if isinstance(prompt, str) else "\n".join(prompt)


def refusal(verdict: Verdict) -> Delta:
    """The answer's end for an intervention: the guardrail's blocked message, ``finish_reason: content_filter``
    (each API's encoder says it its own way: OpenAI's ``content_filter``, the Responses API's ``incomplete``,
    Anthropic's ``refusal``)."""
    text = verdict.text if verdict.blocked and verdict.text else MASKED_MESSAGE
    return Delta(content=text, finish_reason="content_filter")


def unavailable(exc: GuardrailError) -> APIError:
    """A guardrail that could not be asked, failing closed: a 503 in the route's shape."""
    return APIError.upstream(503, f"The guardrail could not assess the content: {exc}", code="guardrail_unavailable")


def failed(note: GuardrailNote, policy: GuardrailPolicy, exc: GuardrailError, side: str) -> None:
    """A guardrail call that failed on the ``side`` (``prompt`` or ``answer``): noted and logged; raised as the
    route's 503 when the policy fails closed, passed over (the text goes on) when it fails open."""
    note.errors += 1
    logger.warning("the guardrail failed on the %s (failing %s): %s", side, policy.fail, exc)
    if policy.fail == "closed":
        raise unavailable(exc) from exc


def counted(note: GuardrailNote, verdict: Verdict, text: str, side: str) -> bool:
    """An assessment of ``text`` noted (its text units, any intervention and why, logged); whether it
    intervened. ``side``: ``prompt`` or ``answer``."""
    note.assessments += 1
    note.text_units += verdict.units or units_of(text)
    if not verdict.intervened:
        return False
    note.intervened, note.reasons = "prompt" if side == "prompt" else "output", list(verdict.reasons)
    logger.warning("the guardrail intervened on the %s: %s", side, "; ".join(verdict.reasons) or "no reason")
    return True


def units_of(text: str) -> int:
    """Text units of ``text`` where an answer gave none (ApplyGuardrail bills 1,000 characters each)."""
    return max(1, math.ceil(len(text) / UNITS_CHARS))


class OutputStage:
    """The answer's guardrail stage: a :class:`~sagestream.dialects.StreamDecoder` over the dialect's own, so the
    one relay loop (:func:`sagestream.relay.relay`) carries it and the encoder sees only what may be sent.

    ``async``: each delta passes at once; each full window is assessed on a worker; between two deltas the
    finished assessments are looked at (``Future.done``: no I/O) and an intervention ends the answer (a
    :func:`refusal` delta; ``done``, so the relay stops reading and the upstream is closed). The delta that ends
    the answer waits for the last windows' verdicts, so nothing ends as ``stop`` unassessed. ``sync``: text is
    held until its window is assessed, then released (masked, where the guardrail masked)."""

    def __init__(
        self,
        inner: StreamDecoder,
        guardrails: Guardrails,
        policy: GuardrailPolicy,
        note: GuardrailNote,
        *,
        deadline: float,
    ) -> None:
        self.inner, self.guardrails, self.policy, self.note = inner, guardrails, policy, note
        self.deadline = deadline
        self.buffer = ""  # the answer's text not yet in an assessed window
        self.held: list[Delta] = []  # sync: the deltas whose text is held, without it
        self.pending: list[tuple[Future[Verdict], str]] = []  # async: windows being assessed
        self.stopped = False
        self.ended = False  # the answer's end passed (or the stage stopped it)

    @property
    def done(self) -> bool:
        return self.stopped or (self.inner.done and self.ended)

    def decode(self, record: str) -> list[Delta]:
        if self.stopped:
            return []
        if record == END_RECORD:  # the upstream ended (:func:`with_end`): what is still held or pending
            return self._end()
        out: list[Delta] = []
        for delta in self.inner.decode(record):
            out.extend(self._sync(delta) if self.policy.mode == "sync" else self._async(delta))
            if self.stopped:
                break
        return out

    def _end(self) -> list[Delta]:
        """After the upstream's last part: the held window released (sync), or the pending verdicts waited for
        (async), where no delta with a finish reason did it already."""
        last = not self.ended
        self.ended = True
        if self.policy.mode == "sync":
            return self._sync(Delta(), flush=True) if self.held or self.buffer else []
        return self._async(Delta(), last=True) if last else []

    # --- async: pass, assess behind ---

    def _async(self, delta: Delta, *, last: bool = False) -> list[Delta]:
        verdict = self._settled(wait=False)
        if verdict is not None:
            return self._stop(verdict)
        self.buffer += delta.content
        while len(self.buffer) >= self.policy.window:
            self._submit(self._take())
        if delta.finish_reason is None and not last:
            return [delta]
        self.ended = True
        if self.buffer:
            self._submit(self._take())
        verdict = self._settled(wait=True)
        if verdict is not None:
            return self._stop(verdict)
        return [] if delta.is_empty else [delta]

    def _submit(self, text: str) -> None:
        self.pending.append((self.guardrails.submit(self.policy, text, "OUTPUT"), text))

    def _settled(self, *, wait: bool) -> Verdict | None:
        """The verdicts come in so far (all of them with ``wait``), noted; the first intervention, if any."""
        while self.pending and (wait or self.pending[0][0].done()):
            future, text = self.pending.pop(0)
            verdict = self._verdict(lambda future=future: self.guardrails.result(future, deadline=self.deadline))
            if verdict is not None:
                self._count(verdict, text)
                if verdict.intervened:
                    self.pending.clear()
                    return verdict
        return None

    # --- sync: hold, assess, release ---

    def _sync(self, delta: Delta, *, flush: bool = False) -> list[Delta]:
        """Text held until its window is assessed, then released as one delta (masked where the guardrail
        masked); the held deltas' other fields (role, tool calls, logprobs, the finish, usage) after it."""
        self.buffer += delta.content
        rest = msgspec.structs.replace(delta, content="") if delta.content else delta
        if not rest.is_empty:
            self.held.append(rest)
        if delta.finish_reason is not None:
            self.ended = True
        flush = flush or self.ended  # after the finish (usage comes after it): nothing is held any more
        out: list[Delta] = []
        masked = False
        while len(self.buffer) >= self.policy.window or (flush and self.buffer):
            text = self._take()
            verdict = self._verdict(
                lambda text=text: self.guardrails.assess(self.policy, text, "OUTPUT", deadline=self.deadline)
            )
            if verdict is not None:
                self._count(verdict, text)
                if verdict.intervened and (verdict.blocked or not verdict.text):
                    return [*out, *self._stop(verdict)]
                if verdict.intervened:
                    text, masked = verdict.text, True
            out.append(Delta(content=text))
        if out or flush:
            held, self.held = self.held, []
            # Masked: the deltas' logprobs would show what was masked.
            out += [msgspec.structs.replace(d, logprobs=None) for d in held] if masked else held
        return [d for d in out if not d.is_empty]

    # --- shared ---

    def _take(self) -> str:
        """The next window's text out of the buffer: at most ``window`` characters, cut before a space where
        one is in the window's second half (a word is not split between two windows where that can be)."""
        window = self.policy.window
        cut = len(self.buffer)
        if cut > window:
            space = self.buffer.rfind(" ", window // 2, window)
            cut = space if space > 0 else window
        text, self.buffer = self.buffer[:cut], self.buffer[cut:]
        return text

    def _verdict(self, ask: Any) -> Verdict | None:
        """``ask()``'s verdict; a failure noted, and then None (failing open) or raised as the route's 503
        (failing closed: the relay makes it the answer's status, or its error event once the answer started)."""
        try:
            verdict: Verdict = ask()
            return verdict
        except GuardrailError as exc:
            self.stopped = self.policy.fail == "closed"
            failed(self.note, self.policy, exc, "answer")
            return None

    def _count(self, verdict: Verdict, text: str) -> None:
        counted(self.note, verdict, text, "answer")

    def _stop(self, verdict: Verdict) -> list[Delta]:
        self.stopped = True
        return [refusal(verdict)]


def with_end(parts: Iterable[bytes], stage: OutputStage) -> Iterator[bytes]:
    """``parts``, then one more that tells ``stage`` the upstream ended (after the dialect's own end, where the
    container sends one): the last window is assessed before the answer ends, finish reason or none."""
    for part in parts:
        yield part
        if stage.inner.done:
            break
    yield _END_PART

"""Bedrock's ``ApplyGuardrail`` on a laptop: the REST call botocore makes for ``bedrock-runtime.apply_guardrail``
(``POST /guardrail/{guardrailIdentifier}/version/{guardrailVersion}/apply``, JSON, as botocore's service model
gives it), answered in its shape (``action``, ``outputs``, ``assessments``, ``usage``) from rules set through a
control API: denied words (a word policy: blocked) and regular-expression PII rules (a sensitive-information
policy's regexes: ``ANONYMIZED``, the match replaced by ``{NAME}``, or ``BLOCKED``). The function reaches it
through botocore's own ``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``; :class:`~sagestream_local.stack.LocalStack` starts
it when ``GUARDRAIL_ID`` is set and no such URL is, and ``make run GUARDRAIL=word,word`` denies those words.

The control API (JSON): ``POST /_guardrail/rules`` sets ``denied_words``, ``pii`` (``[{"name", "regex",
"action"}]``), ``blocked_input_message``, ``blocked_output_message``, ``delay_ms`` (every answer held that
long), ``fault`` (``none``; ``error``: a 503 ``ServiceUnavailableException``; ``garbage``: a 200 whose body is
not JSON); ``GET /_guardrail/calls`` lists the calls (source, characters, action); ``POST /_guardrail/reset``.

Hand-written (the standard library's HTTP server): moto does not implement Bedrock Runtime's guardrails.

Example::

    >>> rules = Rules(denied_words=("zorp",))
    >>> answer = rules.apply("INPUT", "say ZORP now")
    >>> answer["action"], answer["outputs"][0]["text"] == rules.blocked_input_message
    ('GUARDRAIL_INTERVENED', True)
    >>> Rules(pii=({"name": "SSN", "regex": r"\\d{3}-\\d{2}-\\d{4}"},)).apply("OUTPUT", "it is 123-45-6789")["outputs"]
    [{'text': 'it is {SSN}'}]
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from dataclasses import dataclass, field, replace
from http.server import ThreadingHTTPServer
from typing import Any

from sagestream_local.runtime_api import NoDelayHandler

__all__ = ["LOCAL_GUARDRAIL_ID", "LocalGuardrail", "Rules"]

LOCAL_GUARDRAIL_ID = "sagestream-local"
_APPLY = re.compile(r"^/guardrail/([^/]+)/version/([^/]+)/apply$")


@dataclass(frozen=True)
class Rules:
    """What the stand-in's guardrail checks, and how it misbehaves on purpose."""

    denied_words: tuple[str, ...] = ()
    pii: tuple[dict[str, str], ...] = ()
    blocked_input_message: str = "Sorry, the model cannot answer this question."
    blocked_output_message: str = "Sorry, the model cannot answer this question."
    delay_ms: float = 0.0
    fault: str = "none"  # none, error, garbage

    def apply(self, source: str, text: str) -> dict[str, Any]:
        """ApplyGuardrail's answer for ``text`` (``source`` INPUT or OUTPUT)."""
        assessment: dict[str, Any] = {}
        blocked = False
        words = []
        for word in self.denied_words:
            if re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.IGNORECASE):
                words.append({"match": word, "action": "BLOCKED", "detected": True})
        if words:
            assessment["wordPolicy"] = {"customWords": words}
            blocked = True
        masked, regexes = text, []
        for rule in self.pii:
            action = rule.get("action", "ANONYMIZED")
            found = re.search(rule["regex"], text)
            if found:
                regexes.append(
                    {"name": rule["name"], "match": found.group(0), "regex": rule["regex"], "action": action}
                )
                blocked = blocked or action == "BLOCKED"
                masked = re.sub(rule["regex"], "{" + rule["name"] + "}", masked)
        if regexes:
            assessment["sensitiveInformationPolicy"] = {"regexes": regexes}
        units = max(1, math.ceil(len(text) / 1000))
        usage = {
            "topicPolicyUnits": 0,
            "contentPolicyUnits": 0,
            "wordPolicyUnits": units if self.denied_words else 0,
            "sensitiveInformationPolicyUnits": units if self.pii else 0,
            "sensitiveInformationPolicyFreeUnits": 0,
            "contextualGroundingPolicyUnits": 0,
        }
        if not assessment:
            return {"usage": usage, "action": "NONE", "outputs": [], "assessments": [{}]}
        message = self.blocked_input_message if source == "INPUT" else self.blocked_output_message
        return {
            "usage": usage,
            "action": "GUARDRAIL_INTERVENED",
            "actionReason": "Guardrail blocked." if blocked else "Guardrail masked.",
            "outputs": [{"text": message if blocked else masked}],
            "assessments": [assessment],
        }


@dataclass
class _State:
    identifier: str
    rules: Rules = field(default_factory=Rules)
    calls: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(NoDelayHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self._answer(status, json.dumps(body).encode(), {"content-type": "application/json", **(headers or {})})

    def _error(self, status: int, kind: str, message: str) -> None:
        self._json(status, {"message": message}, {"x-amzn-errortype": kind})

    def _body(self) -> Any:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw or b"{}")

    def do_GET(self) -> None:
        state = self.server.state
        if self.path == "/_guardrail/calls":
            with state.lock:
                self._json(200, list(state.calls))
            return
        self._error(404, "UnknownOperationException", f"no route {self.path}")

    def do_POST(self) -> None:
        state = self.server.state
        try:
            body = self._body()
        except ValueError:
            self._error(400, "SerializationException", "the body is not JSON")
            return
        if self.path == "/_guardrail/rules":
            known = {k: v for k, v in body.items() if k in Rules.__dataclass_fields__}
            known = {k: tuple(v) if isinstance(v, list) else v for k, v in known.items()}
            with state.lock:
                state.rules = replace(state.rules, **known)
            self._json(200, {"ok": True})
            return
        if self.path == "/_guardrail/reset":
            with state.lock:
                state.rules, state.calls = Rules(), []
            self._json(200, {"ok": True})
            return
        match = _APPLY.match(self.path.split("?", 1)[0])
        if match is None:
            self._error(404, "UnknownOperationException", f"no route {self.path}")
            return
        self._apply(match.group(1), match.group(2), body)

    def _apply(self, identifier: str, version: str, body: dict[str, Any]) -> None:
        state = self.server.state
        if not self.headers.get("authorization", "").startswith("AWS4-HMAC-SHA256"):
            self._error(403, "AccessDeniedException", "the request is not signed")
            return
        if identifier != state.identifier:
            self._error(404, "ResourceNotFoundException", "The guardrail identifier or version provided does not exist")
            return
        source = body.get("source")
        content = body.get("content")
        if source not in ("INPUT", "OUTPUT") or not isinstance(content, list):
            self._error(400, "ValidationException", "source and content are required")
            return
        text = "".join(str((block.get("text") or {}).get("text", "")) for block in content)
        rules = state.rules
        if rules.delay_ms:
            time.sleep(rules.delay_ms / 1000)
        answer = rules.apply(source, text)
        with state.lock:
            state.calls.append(
                {"source": source, "chars": len(text), "action": answer["action"], "version": version, "text": text}
            )
        if rules.fault == "error":
            self._error(503, "ServiceUnavailableException", "the guardrail stand-in is told to fail")
        elif rules.fault == "garbage":
            self._answer(200, b"<html>not an answer</html>", {"content-type": "application/json"})
        else:
            self._json(200, answer)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: _State


class LocalGuardrail:
    """The stand-in on 127.0.0.1 (a free port, or ``port``), serving the guardrail ``identifier``."""

    def __init__(self, identifier: str = LOCAL_GUARDRAIL_ID, *, rules: Rules | None = None, port: int = 0) -> None:
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.state = _State(identifier, rules or Rules())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="guardrail", daemon=True)

    @property
    def identifier(self) -> str:
        return self._server.state.identifier

    def set_rules(self, **rules: Any) -> None:
        """Replace the given fields of the rules (the control API's ``POST /_guardrail/rules``)."""
        state = self._server.state
        with state.lock:
            changes: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in rules.items()}
            state.rules = replace(state.rules, **changes)

    def reset(self) -> None:
        state = self._server.state
        with state.lock:
            state.rules, state.calls = Rules(), []

    @property
    def calls(self) -> list[dict[str, Any]]:
        with self._server.state.lock:
            return list(self._server.state.calls)

    def start(self) -> LocalGuardrail:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> LocalGuardrail:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

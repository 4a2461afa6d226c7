"""What the simulated endpoint remembers of each request: :class:`Record` and the send time of every token.

``SimulatedEndpoint.records`` and ``GET /_sim/records`` (as :meth:`Record.to_json`) give them to tests and
to other processes (browser test, benchmark). Each record keeps the SageMaker headers the call came with
(``inference_id``, ``prefix_aware_id``, ``session_id``, as botocore serialised ``InferenceId``,
``PrefixAwareId`` and ``SessionId``), whether its prefix was cached (``prefix_hit``), the fault injected, the
outcome, and when the first byte of each token left (:class:`TokenSend`).

Example::

    >>> from sagestream_local.endpoint.scenario import Scenario
    >>> record = Record("r-1", "InvokeEndpoint", "llm", None, None, "application/json", None,
    ...                 b'{"inputs": "Hi"}', {"inputs": "Hi"}, Scenario(), 0, 0)
    >>> record.outcome, record.to_json()["body"], record.to_json()["scenario"]["dialect"]
    ('streaming', '{"inputs": "Hi"}', 'openai')
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from sagestream_local.endpoint.scenario import Scenario

Outcome = Literal["streaming", "completed", "client_closed", "reset", "server_stopped"]


@dataclass
class TokenSend:
    """When the first byte of one model token left (``time.monotonic_ns`` and ``time.time_ns``)."""

    index: int
    text: str
    special: bool
    monotonic_ns: int
    wall_ns: int


@dataclass
class Record:
    """One request as the endpoint saw it. Mutated by its connection thread until ``outcome`` is final."""

    id: str
    operation: Literal["InvokeEndpointWithResponseStream", "InvokeEndpoint"]
    endpoint: str
    target_variant: str | None
    inference_component: str | None
    content_type: str | None
    accept: str | None
    body: bytes
    request: Any  # the body as JSON, None if it is not JSON
    scenario: Scenario
    received_monotonic_ns: int
    received_wall_ns: int
    # The SageMaker headers of routing and correlation, as sent (None: absent).
    inference_id: str | None = None
    prefix_aware_id: str | None = None
    session_id: str | None = None
    prefix_hit: bool = False  # its PrefixAwareId came before: the first token after prefix_hit_ttft_ms
    ttft_ms: float = 0.0  # when its first token is due, from its arrival
    status: int = 0
    invoked_variant: str | None = None
    tokens: list[TokenSend] = field(default_factory=list)
    outcome: Outcome = "streaming"
    fault: str = "none"  # the fault actually injected into this response
    ended_monotonic_ns: int | None = None
    ended_wall_ns: int | None = None

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["body"] = self.body.decode("utf-8", "replace")
        data["scenario"] = self.scenario.to_json()
        data["tokens"] = [dataclasses.asdict(t) for t in self.tokens]
        return data

"""What shapes the simulated endpoint's responses: :class:`Scenario`, its choices and their validation.

A request takes a snapshot of the scenario when it arrives; ``/_sim/scenario`` and
:meth:`~sagestream_local.endpoint.SimulatedEndpoint.set_scenario` change it for the requests after. The
control API brings JSON, so every field is checked here, before a stream starts.

Example::

    >>> tgi = Scenario().replace(dialect="tgi", tokens=8)
    >>> tgi.dialect, tgi.tokens, tgi.to_json()["ttft_ms"]
    ('tgi', 8, 150.0)
    >>> Scenario(tokens="10")
    Traceback (most recent call last):
    ...
    ValueError: tokens must be int, not '10'
    >>> CHOICES["split"]
    ('none', 'midline', 'utf8', 'coalesce', 'bytes')
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, get_args

Dialect = Literal["openai", "tgi", "lmi"]
Framing = Literal["chunked", "close"]
Split = Literal["none", "midline", "utf8", "coalesce", "bytes"]
Fault = Literal[
    "none",
    "model_stream_error",
    "internal_stream_failure",
    "reset",
    "stall",
    "corrupt_crc",
    "http_400",
    "http_424",
    "http_429",
    "throttling",
    "http_500",
    "http_503",
]
CHOICES: dict[str, tuple[str, ...]] = {
    "dialect": get_args(Dialect),
    "framing": get_args(Framing),
    "split": get_args(Split),
    "fault": get_args(Fault),
}


@dataclass(frozen=True)
class Scenario:
    """Everything that shapes one simulated response. A request takes a snapshot when it arrives."""

    dialect: Dialect = "openai"
    ttft_ms: float = 150.0  # request received -> first token's first byte
    cadence_ms: float = 25.0  # between consecutive tokens
    tokens: int = 48  # tokens generated when the request sets no lower max_tokens / max_new_tokens
    non_ascii: float = 0.1  # share of generated words that are multi-byte UTF-8 (café, 日本語, emoji)
    framing: Framing = "chunked"
    split: Split = "none"
    coalesce: int = 3  # model events per PayloadPart when split == "coalesce"
    fault: Fault = "none"
    fault_after: int = 0  # tokens sent before a stream fault; HTTP-status faults always come first
    variant: str = "AllTraffic"  # answered when the request names no target variant
    endpoint_names: tuple[str, ...] | None = None  # None: every name exists; else others get ValidationError
    model: str = "sim-llm"  # the "model" field of OpenAI chunks
    reasoning: int = 0  # openai dialect: reasoning_content tokens before the answer, as vLLM's reasoning parsers send
    context_length: int | None = None  # a prompt over it (TGI, LMI: prompt + max tokens): the 4xx, as a ModelError 424
    # A PrefixAwareId seen before: its prefix is cached, and the first token comes this soon instead (None: off).
    prefix_hit_ttft_ms: float | None = 30.0
    # Capacity (SageMaker's answers for a busy or cold endpoint, before anything else is checked): for this many
    # seconds after the scenario set it, every call is "no capacity" (an inference component scaled to zero,
    # its copy starting), or only calls to the endpoints / inference components ``scaled_to_zero_names`` names;
    # and every ``throttle_every``-th call (counted from when it was set) is throttled. 0: off.
    scaled_to_zero_s: float = 0.0
    scaled_to_zero_names: tuple[str, ...] | None = None
    throttle_every: int = 0

    def __post_init__(self) -> None:
        for name, allowed in CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, not {getattr(self, name)!r}")
        # the control API brings JSON; catch a "10" or 10.5 here rather than mid-stream
        for names, kinds in (
            (("tokens", "coalesce", "fault_after", "reasoning", "throttle_every"), (int,)),
            (("ttft_ms", "cadence_ms", "non_ascii", "scaled_to_zero_s"), (int, float)),
            (("variant", "model"), (str,)),
        ):
            for n in names:
                value = getattr(self, n)
                if isinstance(value, bool) or not isinstance(value, kinds):
                    raise ValueError(f"{n} must be {' or '.join(k.__name__ for k in kinds)}, not {value!r}")
        if self.tokens < 1 or self.coalesce < 1 or self.fault_after < 0 or self.reasoning < 0:
            raise ValueError("tokens and coalesce must be >= 1, fault_after and reasoning >= 0")
        if self.context_length is not None and (
            isinstance(self.context_length, bool) or not isinstance(self.context_length, int) or self.context_length < 1
        ):
            raise ValueError(f"context_length must be a whole number >= 1 or null, not {self.context_length!r}")
        if self.prefix_hit_ttft_ms is not None and (
            isinstance(self.prefix_hit_ttft_ms, bool)
            or not isinstance(self.prefix_hit_ttft_ms, int | float)
            or self.prefix_hit_ttft_ms < 0
        ):
            raise ValueError(f"prefix_hit_ttft_ms must be a number >= 0 or null, not {self.prefix_hit_ttft_ms!r}")
        if self.ttft_ms < 0 or self.cadence_ms < 0 or not 0.0 <= self.non_ascii <= 1.0:
            raise ValueError("ttft_ms and cadence_ms must be >= 0, non_ascii within [0, 1]")
        if self.scaled_to_zero_s < 0 or self.throttle_every < 0:
            raise ValueError("scaled_to_zero_s and throttle_every must be >= 0")
        for names in ("endpoint_names", "scaled_to_zero_names"):
            if getattr(self, names) is not None:
                # JSON brings lists; a frozen scenario keeps a tuple
                object.__setattr__(self, names, tuple(getattr(self, names)))

    def replace(self, **changes: Any) -> Scenario:
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError(f"unknown scenario fields: {sorted(unknown)}")
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for names in ("endpoint_names", "scaled_to_zero_names"):
            if getattr(self, names) is not None:
                data[names] = list(getattr(self, names))
        return data

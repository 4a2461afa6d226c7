"""The client-API encoders side by side: CPU per delta of Anthropic's Messages events against OpenAI's chat chunks.

Both encode the same :class:`~sagestream.delta.Delta` stream (a first delta with the role, text deltas
as tokens come, a finish and usage), each made fresh per round, in alternating rounds in one process so that
the machine's load falls on both alike; each encoder's figure is its best round (the least disturbed), in
process CPU. The Messages encoder's budget is 1.10x the chat encoder's (issue #25).

Example::

    >>> figures = compare(deltas=200, rounds=3)
    >>> sorted(figures)
    ['chat_us_per_delta', 'deltas', 'messages_us_per_delta', 'messages_vs_chat', 'rounds']
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from sagestream.delta import Delta, Usage
from sagestream.protocols._api import StreamEncoder
from sagestream.protocols.anthropic.encoder import MessagesEncoder
from sagestream.protocols.openai.encoder import ChunkEncoder

WORDS = ("the", " river", " runs", " to", " sea", ",", " café", " 日本", " and", " back", ".", "\n")


def deltas(count: int) -> list[Delta]:
    """A stream as a chat container sends it: the role first, one token per delta, then the finish and usage."""
    rng = random.Random(25)
    stream = [Delta(role="assistant", content="")]
    stream += [Delta(content=rng.choice(WORDS)) for _ in range(count)]
    stream.append(Delta(finish_reason="stop", usage=Usage(12, count, 12 + count)))
    return stream


def _cpu_ns(make: Callable[[], StreamEncoder], stream: list[Delta]) -> int:
    encoder = make()
    began = time.process_time_ns()
    for delta in stream:
        encoder.encode(delta)
    encoder.done()
    return time.process_time_ns() - began


def compare(deltas: int = 20_000, rounds: int = 7) -> dict[str, Any]:
    """CPU µs per delta of each encoder over the same stream, and their ratio (messages / chat)."""
    stream = globals()["deltas"](deltas)
    encoders: dict[str, Callable[[], StreamEncoder]] = {
        "chat": lambda: ChunkEncoder(model="m", kind="chat", include_usage=True),
        "messages": lambda: MessagesEncoder(model="m"),
    }
    best = dict.fromkeys(encoders, 1 << 62)
    for _ in range(rounds):
        for name, make in encoders.items():
            best[name] = min(best[name], _cpu_ns(make, stream))
    per_delta = {name: ns / 1000 / len(stream) for name, ns in best.items()}
    return {
        "deltas": len(stream),
        "rounds": rounds,
        "chat_us_per_delta": round(per_delta["chat"], 3),
        "messages_us_per_delta": round(per_delta["messages"], 3),
        "messages_vs_chat": round(per_delta["messages"] / per_delta["chat"], 3),
    }


if __name__ == "__main__":
    print(compare())

"""Stored responses' write and read latency, against moto's DynamoDB server on loopback (what ``make run`` uses).

``python -m bench.store``: for a short chat, a long conversation and one near the request limit, the wall time
of :class:`sagestream.protocols.responses.store.DynamoStore`'s ``put`` (after the answer's last byte, never
before a token) and
``get`` (before a continuation's first token), medians of several rounds, and the compressed size, which
sets DynamoDB's request units (docs/deploy.md, "Stored responses"). moto answers in-process: these are the
store's own costs (compression, JSON, botocore, HTTP on loopback), not DynamoDB's service latency, which a
deployment adds (single-digit milliseconds in-Region, by AWS's account).
"""

from __future__ import annotations

import os
import random
import statistics
import time
import uuid

from sagestream.protocols.responses.store import DynamoStore, encode, owner_of
from sagestream_local.dynamodb import LocalDynamoDB

WORDS = [
    "river",
    "mill",
    "garden",
    "summer",
    "light",
    "water",
    "beans",
    "evening",
    "clouds",
    "wind",
    "hills",
    "children",
    "bakery",
]


def conversation(turns: int, words_per_turn: int) -> list[dict[str, str]]:
    pick = random.Random(turns).choice  # words in a varied order: text compresses about as prose does
    return [
        {
            "type": "message",
            "role": "user" if n % 2 == 0 else "assistant",
            "content": " ".join(pick(WORDS) for _ in range(words_per_turn)),
        }
        for n in range(turns)
    ]


def main() -> int:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    with LocalDynamoDB() as db:
        store = DynamoStore(db.table, ttl_s=3600, client=db.client())
        owner = owner_of("key:bench")
        for name, items in (
            ("short chat (4 turns)", conversation(4, 40)),
            ("long conversation (200 turns)", conversation(200, 120)),
            ("near the 1 MiB request limit", conversation(400, 400)),
        ):
            puts, gets = [], []
            for _ in range(7):
                response_id = "resp_" + uuid.uuid4().hex
                started = time.perf_counter()
                store.put(response_id, owner, {"id": response_id, "output": []}, items, depth=1)
                puts.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                assert store.get(response_id, owner) is not None
                gets.append((time.perf_counter() - started) * 1000)
            size = len(encode({"response": {}, "input": items, "depth": 1}))
            print(
                f"{name:32} compressed {size / 1024:7.1f} KB  put {statistics.median(puts):6.1f} ms  "
                f"get {statistics.median(gets):6.1f} ms (medians of 7)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

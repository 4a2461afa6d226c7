"""Load: 32 concurrent streams through the local Function URL on 8 runtime processes, each with its own
content (the simulated model derives its text from the prompt). Every client gets exactly its own tokens, in
order, none lost, none crossed: compared token by token with what the endpoint recorded sending for its prompt.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid

from sagestream_local.endpoint import prompt_of
from tests.client import StreamedResponse, request
from tests.e2e.conftest import GetStack

STREAMS = 32
PROCESSES = 8
TOKENS = 40


def test_thirty_two_concurrent_streams_on_eight_processes_each_get_exactly_their_own_tokens(
    stack_for: GetStack,
) -> None:
    stack = stack_for(concurrency=PROCESSES)
    assert stack.endpoint is not None and stack.pool is not None
    stack.endpoint.set_scenario(tokens=TOKENS, cadence_ms=4, ttft_ms=20, non_ascii=0.2)
    for _ in range(PROCESSES):  # every process warm, so the figures below are the load's, not cold starts
        assert request(stack.url, "GET", "/health").status == 200
    pids = sorted(e.process.pid for e in stack.pool.environments if e.process is not None)

    run = uuid.uuid4().hex[:6]
    prompts = [f"Client{i}x{run} asks about topic{i * 7919 % 1000} please" for i in range(STREAMS)]
    results: dict[int, StreamedResponse] = {}
    errors: dict[int, BaseException] = {}
    throttled: dict[int, int] = {}  # client -> 429s it got before its stream
    sent_at: dict[int, float] = {}
    gate = threading.Barrier(STREAMS)

    def client(i: int) -> None:
        try:
            gate.wait(10)
            sent_at[i] = time.monotonic()
            body = {"messages": [{"role": "user", "content": prompts[i]}], "stream": True}
            # Beyond the eight environments a Function URL throttles (429, before the function is called) rather
            # than queues; a client retries it, as the OpenAI SDKs do. The rounds of four streams per process
            # then go through one after another.
            for attempt in range(100):
                resp = request(stack.url, "POST", "/v1/chat/completions", body, timeout=60)
                if resp.status != 429:
                    break
                throttled[i] = attempt + 1
                time.sleep(0.02)
            results[i] = resp
        except BaseException as exc:
            errors[i] = exc

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(STREAMS)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    wall = time.monotonic() - started
    assert errors == {}
    assert sorted(results) == list(range(STREAMS))

    records = {prompt_of(r.request): r for r in stack.endpoint.records if isinstance(r.request, dict)}
    assert len(records) == STREAMS, "one upstream call per client"
    ids: set[str] = set()
    ttfts = []
    for i, resp in results.items():
        assert resp.status == 200 and resp.complete, (i, resp.status)
        events = resp.data_events()
        assert events[-1] == "[DONE]"
        chunks = [e for e in events if isinstance(e, dict)]
        got = [c["choices"][0]["delta"]["content"] for c in chunks if c["choices"][0]["delta"].get("content")]
        record = records[prompts[i]]
        assert record.outcome == "completed"
        assert [t.index for t in record.tokens] == list(range(TOKENS)), "the endpoint sent them in order"
        assert got == [t.text for t in record.tokens], f"client {i} got another's tokens or lost some"
        assert got[0] == "You" and f"Client{i}x{run}" in "".join(got), "the text is this prompt's own"
        (chunk_id,) = {c["id"] for c in chunks}
        ids.add(chunk_id)
        first = next(e for e in resp.events() if b'"content":"' in e.data and b'"content":""' not in e.data)
        ttfts.append((first.at - sent_at[i]) * 1000)
    assert len(ids) == STREAMS, "every stream has its own completion id"
    assert sorted(e.process.pid for e in stack.pool.environments if e.process is not None) == pids
    assert all(e.exit_codes == [] for e in stack.pool.environments)
    ttfts.sort()
    print(
        f"\nload: {STREAMS} streams x {TOKENS} tokens on {PROCESSES} processes in {wall:.2f} s; "
        f"time to first token p50 {statistics.median(ttfts):.0f} ms, p95 {ttfts[int(0.95 * len(ttfts)) - 1]:.0f} ms, "
        f"max {ttfts[-1]:.0f} ms; {sum(throttled.values())} throttles (429) retried by {len(throttled)} clients"
    )

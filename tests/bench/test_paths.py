"""bench.paths: every path's bursts and first delta (issue 53 item 7), measured small over the local stack."""

from __future__ import annotations

import json

import pytest

from bench import paths, report

# A follower's added delay is bounded by design at about FLUSH_S + POLL_S (0.2 s) and a round trip each way;
# on a busy shared machine wake-ups add to it: ten times the bound fails only a follower that is not following.
FOLLOWER_ADDED_MS_LIMIT = 10 * paths.FOLLOWER_BOUND_MS
# 0 bursts on an idle machine; a busy one can hold a reader or the chain back long enough to bunch a few (a 72 ms
# stall bunched 4 of 40 on this 2-core host while other test suites ran). A stream through an event log and a
# poller bunches 36-38 of 40 (issue 53's background creator, and bench/results/paths-before-ac84e1a.json).
BUSY_MACHINE_BURSTS = 8


def _sse(events: list[dict[str, object]]) -> bytes:
    body = b"".join(b"event: x\ndata: " + json.dumps(e).encode() + b"\n\n" for e in events)
    chunked = b"".join(b"%x\r\n%b\r\n" % (len(body[i : i + 5]), body[i : i + 5]) for i in range(0, len(body), 5))
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked + b"0\r\n\r\n"


def test_the_reader_counts_messages_and_responses_text_deltas_and_notes_the_response_id() -> None:
    messages = _sse(
        [
            {"type": "message_start", "message": {"id": "msg_1"}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hé"}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{"}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "llo"}},
            {"type": "message_stop"},
        ]
    )
    reader = paths.PathStream()
    counted = sum(reader.feed(messages[i : i + 3]) for i in range(0, len(messages), 3))
    assert (counted, "".join(reader.text), reader.complete, reader.errors) == (2, "Héllo", True, [])
    ids: list[str] = []
    responses = _sse(
        [
            {"type": "response.created", "response": {"id": "resp_1"}, "sequence_number": 0},
            {"type": "response.output_text.delta", "delta": "a", "sequence_number": 1},
            {"type": "response.output_text.delta", "delta": "b", "sequence_number": 2},
            {"type": "response.output_text.done", "text": "ab", "sequence_number": 3},
            {"type": "response.completed", "response": {"id": "resp_1"}, "sequence_number": 4},
        ]
    )
    reader = paths.PathStream(on_id=ids.append)
    counted = sum(reader.feed(responses[i : i + 4]) for i in range(0, len(responses), 4))
    assert (counted, "".join(reader.text), reader.response_id, ids) == (2, "ab", "resp_1", ["resp_1"])
    chat = _sse([{"choices": [{"delta": {"content": "c"}}]}])
    assert paths.PathStream().feed(chat) == 1, "chat's chunks are counted as measure counts them"
    failed = paths.PathStream()
    failed.feed(_sse([{"type": "error", "error": {"type": "overloaded_error"}}]))
    assert failed.errors and failed.errors[0]["type"] == "error"


@pytest.mark.timeout(400)
def test_every_path_is_measured_with_and_without_quotas() -> None:
    figures = paths.measure(runs=1, fresh_runs=1)
    tokens = paths.SCENARIO.tokens
    assert list(figures["rows"]) == ["without QUOTAS", "with QUOTAS"]
    for side, rows in figures["rows"].items():
        assert tuple(rows) == paths.PATHS, side
        for path, row in rows.items():
            # every delta of every run reached the reader, one per token the endpoint sent
            assert row["runs"] == 1 and row["deltas"] == row["tokens_sent"] == tokens, (side, path, row)
            assert row["added_ms_p50"] is not None and row["added_ms_p50"] >= -1, (side, path, row)
            if path == "background-follower":
                assert row["added_ms_max"] < FOLLOWER_ADDED_MS_LIMIT, (side, row)
                assert row["ttft_vs_chat_ms"] is None
                continue
            # no delta before the endpoint's first token; a first delta, not one after a stall of seconds
            assert paths.SCENARIO.ttft_ms <= row["ttft_ms_median"] < 10 * paths.SCENARIO.ttft_ms, (side, path, row)
            assert row["burst_gaps"] <= BUSY_MACHINE_BURSTS, (side, path, row)
        assert rows["chat"]["ttft_vs_chat_ms"] == 0
    section = report.paths_section(figures)
    assert sum(line.startswith("| `") for line in section) == 2 * len(paths.PATHS)
    target = "burst_gaps == 0 on every path (with and without QUOTAS)"
    measured = {name: value for name, value, _, _ in report.target_rows({"paths": figures, "workloads": {}})}
    followers = sum(rows["background-follower"]["burst_gaps"] for rows in figures["rows"].values())
    all_bursts = sum(row["burst_gaps"] for rows in figures["rows"].values() for row in rows.values())
    assert measured[target] == all_bursts - followers

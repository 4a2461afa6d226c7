"""The instruction counts are read right: marks pair with callgrind's numbered dumps, targets say their kind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import counted, instructions, report
from tests.prerequisites import unavailable


def test_each_mark_is_the_work_since_the_previous_one() -> None:
    assert counted.intervals("event 100\ncall 250\ncalled 1250\nwrite 1300\n") == [
        ("event", 0),
        ("call", 150),
        ("called", 1000),
        ("write", 50),
    ]


def test_dump_n_is_the_interval_that_mark_n_ends(tmp_path: Path) -> None:
    (tmp_path / "marks").write_text("event 1\ncall 2\nwrite 3\n")
    for n, total in [(1, 500), (2, 70), (3, 9000), (10, 1)]:
        (tmp_path / f"callgrind.77.{n}").write_text(f"version: 1\ncreator: x\nsummary: {total}\ntotals: {total}\n")
    (tmp_path / "callgrind.77").write_text("summary: 123456\n")  # the dump at exit: not a mark's
    assert instructions._dumps(tmp_path) == [500, 70, 9000, 1]
    with pytest.raises(RuntimeError, match="3 marks but 4 callgrind dumps"):
        instructions._intervals(tmp_path, counting=True)


def test_callgrind_counts_more_between_marks_that_do_more(tmp_path: Path) -> None:
    if shutil.which("valgrind") is None:
        unavailable("valgrind is needed for the instruction counts (apt-get install valgrind)")
    code = (
        "from bench.counted import mark\n"
        "mark('start'); sum(range(1000)); mark('small'); sum(range(100000)); mark('large')\n"
    )
    command = instructions._command([sys.executable, "-c", code], tmp_path, counting=True)
    env = {**os.environ, "COUNTED_MARKS": str(tmp_path / "marks"), "PYTHONPATH": instructions.PYTHONPATH}
    subprocess.run(command, env=env, check=True, capture_output=True, timeout=300)
    (_, _), (_, small), (_, large) = instructions._intervals(tmp_path, counting=True)
    assert 0 < small < large and large > 50 * small


def test_every_target_says_what_kind_of_figure_it_is() -> None:
    doc = {
        "cold": {"cold_init_cpu_ratio": 1.6, "first_token_cold_minus_warm_cpu_ms": 2.3},
        "steady": {
            "instructions": {
                "per_delta_vs_line_iterator": 0.99,
                "per_delta_vs_line_iterator_messages": 1.01,
                "first_token_own": 1_400_000,
                "first_token_own_messages": 1_600_000,
            },
            "cpu": {},
        },
        "validation": {"worst_ratio": 0.4},
        "workloads": {},
    }
    rows = {name: (value, met, kind) for name, value, met, kind in report.target_rows(doc)}
    assert rows["instructions per delta <= 1.0x line-iterator's (chat)"] == (0.99, True, "instructions")
    assert rows["instructions per delta <= 1.0x line-iterator's (Messages)"] == (1.01, False, "instructions")
    assert rows["instructions per delta <= 1.0x line-iterator's (Responses)"] == (None, None, "instructions")
    assert rows["cold init CPU <= 1.15x a bare boto3 client"] == (1.6, False, "CPU")
    assert rows["first-token own instructions <= 1.5 M (Messages)"] == (1_600_000, False, "instructions")
    assert rows["first-token own instructions <= 1.5 M (Responses)"] == (None, None, "instructions")
    assert rows["validation instructions <= pydantic's, every body"] == (0.4, True, "instructions")
    # Retired, with its reason: the same instructions cost a cold cache's time.
    assert "first-token own CPU <= 0.25 ms (warm)" not in rows
    assert "first-token own CPU <= 0.25 ms (warm)" in report.RETIRED
    assert {kind for _, _, kind in rows.values()} <= {"instructions", "CPU", "wall", "memory"}

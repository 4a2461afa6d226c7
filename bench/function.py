"""The function's own figures, read from the invocation log records its runtime process writes.

The chain figures (TTFT, ``added``) are timed at a client, so they include the local Function URL, the
local Runtime API and the simulated endpoint, all of which AWS runs on Lambda. What Lambda bills, and what
slows down at a small ``MemorySize``, is the runtime process alone. Each invocation's log record carries
its part (see :mod:`sagestream.telemetry`):

- ``cpu_ms``: the invocation thread's CPU (``time.thread_time``; the process's, one invocation at a time) from
  the event's arrival to the end of the invocation;
- ``ttft_cpu_ms``: the same CPU from the event's arrival to the first delta written;
- ``relay_ms_p50`` / ``relay_ms_p99``: per delta, wall time from the upstream read that completed its frame
  to the write that sent it on.

The benchmark sends the runtime process's stdout to a file and, after each turn of the ``sagestream``
peer, reads the records that turn added. A peer's turn is one warm-up request then ``runs`` measured ones,
so the last ``runs`` records are the measured ones. Each figure is the median over those runs.

Example::

    >>> records = [{"message": "invocation", "cpu_ms": c, "ttft_cpu_ms": t, "relay_ms_p50": 0.1,
    ...             "relay_ms_p99": p, "output_tokens": 80} for c, t, p in [(9.0, 1.0, 0.2), (11.0, 1.4, 0.3)]]
    >>> figures(records, runs=2)["ttft_cpu_ms"], figures(records, runs=2)["relay_ms_p99"]
    (1.2, 0.25)
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

FIELDS = ("cpu_ms", "ttft_cpu_ms", "relay_ms_p50", "relay_ms_p99")


class InvocationLog:
    """The runtime process's stdout, kept in a file; read on from where the last turn stopped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def new_records(self) -> list[dict[str, Any]]:
        """The invocation records written since the last call."""
        with self.path.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next call
        self._offset += end
        return list(invocation_records(data[:end].decode("utf-8", "replace").splitlines()))


def invocation_records(lines: Iterable[str]) -> Iterable[dict[str, Any]]:
    """The ``"message": "invocation"`` records among log lines (EMF blobs and other records skipped)."""
    for line in lines:
        if '"invocation"' not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("message") == "invocation":
            yield record


def _median(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def figures(records: Sequence[Mapping[str, Any]], runs: int) -> dict[str, Any]:
    """Medians over the last ``runs`` records of each of :data:`FIELDS`, and CPU per delta written."""
    measured = list(records)[-runs:] if runs else []
    out: dict[str, Any] = {}
    for name in FIELDS:
        out[name] = _median([float(r[name]) for r in measured if r.get(name) is not None])
    per_delta = [
        1000 * float(r["cpu_ms"]) / int(r["output_tokens"])
        for r in measured
        if r.get("cpu_ms") is not None and r.get("output_tokens")
    ]
    # The invocation's own CPU (per request and per delta together) spread over its deltas.
    out["invocation_cpu_us_per_delta"] = _median(per_delta)
    out["invocations"] = len(measured)
    return out

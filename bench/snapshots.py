"""Snapshot cost of the reference repair executor (``agent_triage_client.executor.Snapshots``).

A run of ``--messages`` messages (400-character contents, a plan and a tool cache growing beside
them, the state the executor snapshots before each message): the bytes kept as differences
(pickled) against the bytes of one full copy per message, the time of one ``take`` and of one
``get`` in the middle of the run (a replay from the first snapshot), and that every snapshot
restores equal to a deep copy taken at the time.

Run (a second)::

    .venv/bin/python bench/snapshots.py --messages 300
"""

from __future__ import annotations

import argparse
import copy
import pickle
import time
from typing import Any

from agent_triage_client.executor import Snapshots


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=300)
    n = ap.parse_args().messages
    snaps = Snapshots()
    state: dict[str, Any] = {"messages": [], "state": {"plan": [], "cache": {}}}
    expected: list[dict[str, Any]] = []
    full_bytes, take_s = 0, 0.0
    for i in range(n):
        t0 = time.perf_counter()
        snaps.take(i, state)
        take_s += time.perf_counter() - t0
        expected.append(copy.deepcopy(state))
        full_bytes += len(pickle.dumps(state))
        state["messages"].append({"role": "assistant" if i % 2 else "tool", "content": f"{i:04d} " + "x" * 395})
        state["state"]["plan"].append({"step": i, "done": False})
        state["state"]["plan"][i // 2]["done"] = True
        state["state"]["cache"][f"k{i}"] = [i] * 5
    t0 = time.perf_counter()
    middle = snaps.get(n // 2)
    get_s = time.perf_counter() - t0
    exact = all(snaps.get(i) == expected[i] for i in range(n)) and middle == expected[n // 2]
    diff_bytes = len(pickle.dumps(snaps._diffs))
    whole = len(pickle.dumps(snaps.get(0))) + len(pickle.dumps(snaps.get(n - 1)))
    print(f"snapshots: {n} messages | differences {diff_bytes / 1e3:.0f} kB + first and latest whole "
          f"{whole / 1e3:.0f} kB vs {full_bytes / 1e6:.1f} MB as full copies | take {take_s / n * 1e3:.2f} ms "
          f"| get(mid) {get_s * 1e3:.1f} ms | exact {exact}")


if __name__ == "__main__":
    main()

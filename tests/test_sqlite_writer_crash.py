"""The kept SQLite writer (:meth:`serve.store.base.Database.unit`) and its reads (``peek``) when another
process dies in the middle of a write transaction: a real ``sqlite3`` process holding ``BEGIN IMMEDIATE``
with pages spilled to the WAL, killed with SIGKILL, as a crashed worker of ``triage serve --workers N``
would be."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from model.core.errors import StoreUnavailableError
from serve.store import Stores

#: Another process: a write transaction of many rows with a tiny page cache (its dirty pages spill into
#: the WAL before any commit), then it waits to be killed.
_DYING_WRITER = r"""
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA cache_size=4")
conn.execute("BEGIN IMMEDIATE")
cols = [r[1] for r in conn.execute("PRAGMA table_info(traces)")]
picked = ", ".join("?" if c == "id" else c for c in cols)
conn.executemany(f"INSERT INTO traces ({', '.join(cols)}) SELECT {picked} FROM traces WHERE id = 'seed'",
                 [(f"doomed-{i}",) for i in range(800)])
print("HELD", flush=True)
time.sleep(120)
"""


def _put(db: Any, store: Stores, tid: str) -> None:
    store.traces.put_trace(
        db, tenant="a", trace_id=tid, trace={"id": tid, "steps": [{"kind": "user_input", "content": "x" * 3000}]},
        response={"healthy": True, "model_version": "m1", "failures": [], "signals": []},
        session_id=None, task_type=None, agent="bot")


def _count(path: Path, where: str = "") -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute(f"SELECT count(*) FROM traces {where}").fetchone()[0])


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_writer_killed_mid_transaction_loses_nothing_committed_and_the_kept_writer_goes_on(
        tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    store = Stores.at(f"sqlite:///{path}", busy_timeout_s=0.5)
    store.db.upgrade()
    with store.db.unit() as u:  # the kept writer is checked out, its cache warm, before the other process writes
        _put(u, store, "seed")
    assert store.traces.stored_run("a", "seed") is not None
    child = subprocess.Popen([sys.executable, "-c", _DYING_WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "HELD"
        wal = path.with_name(path.name + "-wal")
        assert wal.stat().st_size > 100_000  # its uncommitted pages are in the WAL
        # while it holds the write lock: reads see the last commit; a write waits its busy timeout, then 503
        assert store.traces.stored_run("a", "doomed-0") is None
        assert store.traces.stored_run("a", "seed") is not None
        t0 = time.monotonic()
        with pytest.raises(StoreUnavailableError), store.db.unit() as u:
            _put(u, store, "blocked")
        assert time.monotonic() - t0 >= 0.4
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    # the kernel released its locks: the next write begins at once, on a writer from the pool again
    # (the failed one above gave the kept writer back), and every later one on the kept writer
    for i in range(5):
        with store.db.unit() as u:
            _put(u, store, f"after-{i}")
    for tid in ("seed", *(f"after-{i}" for i in range(5))):
        assert store.traces.stored_run("a", tid) is not None, tid
    assert store.traces.stored_run("a", "doomed-0") is None
    assert store.traces.stored_run("a", "blocked") is None
    store.db.dispose()
    # a new process's view: every committed row, none of the dead writer's, the file whole
    assert _count(path) == 6
    assert _count(path, "WHERE id LIKE 'doomed-%'") == 0
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

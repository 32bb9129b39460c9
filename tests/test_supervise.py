"""``kill -9`` of a real ``triage serve --workers 2`` master takes its workers down with it, and a
new server binds the same port at once (serve/supervise.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, LiveServer, child_pids


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads worker pids from /proc (Linux)")
def test_kill_9_of_the_master_stops_its_workers(tmp_path: Path) -> None:
    env = {"TRIAGE_DATA_DIR": str(tmp_path), "TRIAGE_AUTH": "off", "TRIAGE_CLASSIFIER": "false"}
    srv = LiveServer(env=env, args=["--workers", "2"]).wait_ready(timeout=120)
    try:
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while time.monotonic() < deadline:  # both workers up (the resource tracker is a child too)
            workers = [p for p in child_pids(srv.proc.pid) if b"resource_tracker" not in Path(f"/proc/{p}/cmdline").read_bytes()]
            if len(workers) >= 2:
                break
            time.sleep(0.2)
        assert len(workers) == 2
        assert httpx.get(f"{srv.url}/v1/traces").status_code == 200

        os.kill(srv.proc.pid, signal.SIGKILL)
        srv.proc.wait(timeout=10)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(_alive(p) for p in workers):
            time.sleep(0.1)
        assert not any(_alive(p) for p in workers), "workers still serving after their master was killed"
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{srv.url}/healthz", timeout=2)

        # the port is free again: a new server on it starts and answers
        proc = subprocess.Popen(
            [sys.executable, "-m", "serve.cli.main", "serve", "--host", "127.0.0.1", "--port", str(srv.port), "--workers", "2"],
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 90
            ok = False
            while time.monotonic() < deadline and proc.poll() is None and not ok:
                try:
                    ok = httpx.get(f"{srv.url}/healthz", timeout=1).status_code == 200
                except httpx.HTTPError:
                    time.sleep(0.2)
            err = proc.stderr.read() if proc.poll() is not None and proc.stderr is not None else b""
            assert ok, err.decode(errors="replace")[-2000:]
        finally:
            proc.terminate()
            proc.wait(timeout=20)
            if proc.stderr is not None:
                proc.stderr.close()
    finally:
        srv.stop()


def _helper(queue: Any) -> None:  # a helper process (spawned): watches its parent, then waits to be stopped
    from serve.supervise import watch_master

    queue.put(watch_master(grace_s=1.0))
    time.sleep(120)


def _parent(queue: Any, pids: Any) -> None:  # a worker (spawned) that starts its helper from a thread that ends
    import multiprocessing
    import threading

    def start() -> None:  # (a request's thread: it ends once the helper is up and watching)
        proc = multiprocessing.get_context("spawn").Process(target=_helper, args=(queue,), daemon=False)
        proc.start()
        pids.put((proc.pid, queue.get(timeout=60)))

    t = threading.Thread(target=start)
    t.start()
    t.join()
    time.sleep(120)


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads process states from /proc (Linux)")
def test_a_helper_started_from_a_thread_outlives_it_and_stops_with_its_parent() -> None:
    """A process that calls ``watch_master`` stops when its parent exits, and not when the thread of the
    parent that started it ends (the kernel's parent-death signal would stop it then)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    queue, pids = ctx.Queue(), ctx.Queue()
    parent = ctx.Process(target=_parent, args=(queue, pids))
    parent.start()
    helper = None
    try:
        helper, watching = pids.get(timeout=60)
        assert watching is True  # it watches, and the thread that started it has ended since
        time.sleep(1.5)
        assert _alive(helper), "the helper stopped when the thread that started it ended"
        os.kill(parent.pid, signal.SIGKILL)
        parent.join(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(helper):
            time.sleep(0.05)
        assert not _alive(helper), "the helper outlived its parent"
    finally:
        if parent.is_alive():
            parent.kill()
        if helper is not None:
            with contextlib.suppress(OSError):
                os.kill(helper, signal.SIGKILL)

"""A real ``triage serve`` on 127.0.0.1 for the benches that drive it over HTTP.

``start(data, env)`` starts one on a free port with ``TRIAGE_DATA_DIR=data`` and the given
settings, its output in ``data/server.log``, and waits for ``/healthz`` (or ``/readyz``); ``stop(proc)`` ends it.
(``bench/service.py``'s ``Server`` is the load benches' fuller version: workers, keys, RSS.)
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
# Latency benches measure the request path, not the rate limits.
UNLIMITED = {"TRIAGE_RATE_LIMIT_KEY_RPS": "0", "TRIAGE_RATE_LIMIT_TENANT_RPS": "0"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(
    data: Path, env: dict[str, str], *, ready: str = "/healthz", timeout: float = 120.0
) -> tuple[subprocess.Popen[bytes], str]:
    """The server's process and base URL once ``ready`` answers 200 (``/readyz``: the models loaded);
    the log's tail if it dies first."""
    port = free_port()
    full = {**os.environ, "TRIAGE_DATA_DIR": str(data), "PYTHONPATH": str(ROOT), **env}
    log_path = Path(data) / "server.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "serve.cli.main", "serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT, env=full, stdout=log, stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {log_path.read_text(errors='replace')[-2000:]}")
        try:
            if httpx.get(f"{base}{ready}", timeout=1).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    stop(proc)
    raise RuntimeError(f"server did not answer {ready} within {timeout:.0f} s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()

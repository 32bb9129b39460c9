"""Shared pytest fixtures. Keep this small: each part of the project owns its own fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The request-rate limits are off for the suite (its tests send bursts far above a real agent's
# rate); tests/test_ratelimit.py turns them on where they are what is tested.
os.environ.setdefault("TRIAGE_RATE_LIMIT_KEY_RPS", "0")
os.environ.setdefault("TRIAGE_RATE_LIMIT_TENANT_RPS", "0")


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_pids(pid: int) -> list[int]:
    """The process ids of ``pid``'s children (every thread's, from ``/proc``: Linux only): a server's workers."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


class LiveServer:
    """A real ``triage serve`` (uvicorn) in a subprocess on 127.0.0.1; ``url`` is its base URL."""

    def __init__(self, env: dict[str, str] | None = None, args: list[str] | None = None) -> None:
        import subprocess
        import sys

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        full_env = {**os.environ, "TRIAGE_PORT": str(self.port), **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "serve.cli.main", "serve", "--host", "127.0.0.1", "--port", str(self.port), *(args or [])],
            cwd=ROOT,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        # Drain the server's output: an unread pipe fills up (64 KB of access log) and then
        # blocks the server's event loop on its next log line. The last lines are kept for errors.
        import collections
        import threading

        self.output: collections.deque[str] = collections.deque(maxlen=2000)
        self._drain = threading.Thread(target=self._read_output, daemon=True)
        self._drain.start()

    def _read_output(self) -> None:
        assert self.proc.stdout is not None
        for line in iter(self.proc.stdout.readline, b""):
            self.output.append(line.decode(errors="replace"))

    def wait_ready(self, timeout: float = 60.0) -> LiveServer:
        import time

        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._drain.join(timeout=5)
                out = "".join(self.output)
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{out}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("server did not answer /healthz in time")

    def stop(self) -> None:
        """SIGTERM (SIGKILL after 10 s), then close the output pipe once the drain has read it to the end
        (a pipe left to the garbage collector is a ResourceWarning)."""
        import subprocess

        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._drain.join(timeout=5)
        if not self._drain.is_alive() and self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture(scope="session")
def live_server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One real uvicorn server for the session (rules + shipped classifier when present)."""
    work = tmp_path_factory.mktemp("live")
    server = LiveServer(env={"TRIAGE_AUTH": "off", "TRIAGE_DATA_DIR": str(work)}).wait_ready()
    yield server
    server.stop()

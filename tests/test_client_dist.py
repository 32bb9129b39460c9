"""The client distribution installs alone and passes its own tests against a real ``triage serve``.

A fresh virtual environment gets ``pip install ./client`` (httpx + pydantic, nothing of the
server) and pytest; ``client/tests`` then runs there, against a uvicorn server on 127.0.0.1 with
authentication on. ``make client-test`` runs just this.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from serve.auth import create_key
from serve.store import Stores
from tests.conftest import ROOT, LiveServer

pytestmark = pytest.mark.slow


def _pip(venv: Path, *args: str) -> None:
    r = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-c",
                        str(ROOT / "constraints.txt"), *args], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def test_client_installs_alone_and_passes_its_tests(tmp_path: Path) -> None:
    src = tmp_path / "client"
    shutil.copytree(ROOT / "client", src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    _pip(venv, str(src), "pytest>=8")
    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
                            capture_output=True, text=True, check=True).stdout.lower()
    assert "agent-triage-client==" in listed and "fastapi" not in listed and "onnxruntime" not in listed

    data = tmp_path / "data"
    data.mkdir()
    store = Stores.at(f"sqlite:///{data / 'triage.db'}")
    store.db.upgrade()
    key = create_key(store.keys, "client-tests")[0]
    store.db.dispose()
    server = LiveServer(env={"TRIAGE_DATA_DIR": str(data), "TRIAGE_AUTH": "on", "TRIAGE_AUTH_CACHE_S": "0"})
    try:
        server.wait_ready()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        env.update(TRIAGE_TEST_URL=server.url, TRIAGE_TEST_KEY=key)
        r = subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            str(src / "tests")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    finally:
        server.stop()
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert " passed" in out and "skipped" not in out and "failed" not in out, out[-3000:]

"""The client's framework extras install alone and its examples run as a user runs them.

A fresh virtual environment gets ``pip install './client[langchain,openai-agents]'`` (LangChain v1
with langgraph, the OpenAI Agents SDK; no torch, nothing of the server); each example in
``client/examples/`` then runs as a script against a real ``triage serve`` (authentication on) and
must print, for every scenario, the failure without triage and the answer with it.

It installs LangChain, langgraph and the Agents SDK into a fresh venv (about 80 s of the ~2 min
it takes on the shared 2-core machine), so `make test` leaves it out: `make client-extras-test`
runs it (``TRIAGE_TEST_CLIENT_EXTRAS=1``). The same examples run in every `make test` inside the
project's venv (tests/test_client_adapters.py).
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

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("TRIAGE_TEST_CLIENT_EXTRAS") != "1",
                       reason="installs the framework extras into a fresh venv: make client-extras-test"),
]

ANSWER = "In Paris today: 18 C, sunny."
EXPECTED = {
    "langchain_middleware.py": {
        "503": ("HTTPError: 503", "['retry']"),
        "provider": ("HTTPError: 503", "['retry']"),
        "loop": ("GraphRecursionError", "['rollback']"),
    },
    "openai_agents_repair.py": {
        "503": ("UserError: Error running tool weather: 503", "['retry']"),
        "provider": ("HTTPError: 503", "['retry']"),
        "loop": ("MaxTurnsExceeded", "['rollback']"),
    },
}


def test_extras_install_alone_and_the_examples_recover(tmp_path: Path) -> None:
    src = tmp_path / "client"
    shutil.copytree(ROOT / "client", src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    r = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-c", str(ROOT / "constraints.txt"),
                        f"{src}[langchain,openai-agents]"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
                            capture_output=True, text=True, check=True).stdout.lower()
    assert "langchain==1." in listed and "langgraph==" in listed and "openai-agents==" in listed
    assert not any(p in listed for p in ("torch==", "fastapi==", "onnxruntime==", "sqlalchemy=="))

    data = tmp_path / "data"
    data.mkdir()
    store = Stores.at(f"sqlite:///{data / 'triage.db'}")
    store.db.upgrade()
    key = create_key(store.keys, "examples")[0]
    store.db.dispose()
    server = LiveServer(env={"TRIAGE_DATA_DIR": str(data), "TRIAGE_AUTH": "on", "TRIAGE_AUTH_CACHE_S": "0"})
    outputs = {}
    try:
        server.wait_ready()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        for example in EXPECTED:
            run = subprocess.run([str(venv / "bin" / "python"), str(src / "examples" / example),
                                  "--url", server.url, "--key", key],
                                 cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
            assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
            outputs[example] = run.stdout
    finally:
        server.stop()
    for example, scenarios in EXPECTED.items():
        lines = outputs[example].splitlines()
        for scenario, (failure, repairs) in scenarios.items():
            without = [x for x in lines if x.split()[:2] == [scenario, "without"]]
            with_ = [x for x in lines if x.split()[:2] == [scenario, "with"]]
            assert len(without) == 1 and f"triage: {failure}" in without[0], outputs[example]
            assert len(with_) == 1 and f"triage: {ANSWER} | repairs {repairs}" in with_[0], outputs[example]

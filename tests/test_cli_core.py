"""``triage diagnose`` / ``triage schema`` as a user runs them (a real subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from model.core.schema import Trace
from tests.conftest import ROOT


def triage(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "serve.cli.main", *args], cwd=ROOT, input=stdin, capture_output=True, timeout=120
    )


def test_diagnose_json_contract() -> None:
    r = triage("diagnose", "docs/examples/loop.json", "--json")
    assert r.returncode == 0, r.stderr.decode()
    out = json.loads(r.stdout)
    assert out["healthy"] is False
    assert out["primary"]["kind"] == "loop" and out["primary"]["source_index"] == 6
    assert out["recommendation"]["strategy"] == "rollback"
    assert {"kind", "confidence", "source_index"} <= set(out["failures"][0])


def test_diagnose_readable_summary_and_stdin() -> None:
    data = (ROOT / "docs/examples/ignored_error.json").read_bytes()
    r = triage("diagnose", "-", stdin=data)
    assert r.returncode == 0, r.stderr.decode()
    text = r.stdout.decode()
    assert "ignored_error" in text and "recommendation:" in text


def test_unreadable_input_exit_2_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"messages": [{"role": "user", "content": "hi"}')
    r = triage("diagnose", str(bad))
    assert r.returncode == 2
    err = r.stderr.decode().strip()
    assert err.startswith("error:") and len(err.splitlines()) == 1 and "Traceback" not in err
    missing = triage("diagnose", str(tmp_path / "nope.json"))
    assert missing.returncode == 2 and "no such file" in missing.stderr.decode()


def test_step_limit_flag(tmp_path: Path) -> None:
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(6000)]
    f = tmp_path / "long.json"
    f.write_text(json.dumps(msgs))
    r = triage("diagnose", str(f), "--json")
    assert r.returncode == 2 and "5000" in r.stderr.decode()
    ok = triage("diagnose", str(f), "--json", "--max-steps", "7000")
    assert ok.returncode == 0, ok.stderr.decode()
    assert json.loads(ok.stdout)["steps"] == 6000


def test_jsonl_batch_one_response_per_line(tmp_path: Path) -> None:
    lines = [
        (ROOT / "docs/examples/healthy.json").read_text(),
        "{not json",
        (ROOT / "docs/examples/loop.json").read_text(),
    ]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(json.dumps(json.loads(x)["trace"]) if x.startswith("{\n") else x for x in lines) + "\n")
    out = tmp_path / "out.jsonl"
    r = triage("diagnose", "--jsonl", str(src), "--out", str(out))
    assert r.returncode == 2 and "1 of 3 lines" in r.stderr.decode()
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 3
    assert rows[0]["healthy"] is True
    assert rows[1]["line"] == 2 and "line 2" in rows[1]["error"]
    assert rows[2]["primary"]["kind"] == "loop"


def test_schema_command_matches_committed(tmp_path: Path) -> None:
    out = tmp_path / "schema.json"
    r = triage("schema", str(out))
    assert r.returncode == 0, r.stderr.decode()
    assert json.loads(out.read_text()) == json.loads((ROOT / "docs/trace.schema.json").read_text()), (
        "docs/trace.schema.json is stale: run `make schema`"
    )
    assert json.loads(out.read_text())["properties"]["steps"]["type"] == "array"
    Trace.model_validate({"steps": [{"kind": "user_input", "content": "x"}]})


def test_serve_on_a_taken_port_says_so_and_names_another(tmp_path: Path) -> None:
    """``make run`` on a port another server holds: one line naming the port and ``PORT=``, exit 2,
    no uvicorn traceback."""
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "serve.cli.main", "serve", "--port", str(port)], cwd=ROOT,
                             capture_output=True, timeout=120,
                             env={**os.environ, "TRIAGE_DATA_DIR": str(tmp_path)})
    err = out.stderr.decode()
    assert out.returncode == 2, err
    assert f"127.0.0.1:{port}" in err and f"PORT={port + 1}" in err and "Traceback" not in err


def test_a_bad_setting_is_named_in_one_line(tmp_path: Path) -> None:
    """A ``TRIAGE_*`` value the settings refuse: ``triage serve`` (and any command that reads the settings)
    names the variable and the values it takes, exit 2, no traceback."""
    for name, value, command in (("TRIAGE_CPU_AFFINITY", "on", ["serve", "--port", "1"]),
                                 ("TRIAGE_AUTH", "maybe", ["keys", "list"])):
        out = subprocess.run([sys.executable, "-m", "serve.cli.main", *command], cwd=ROOT, capture_output=True,
                             timeout=120, env={**os.environ, "TRIAGE_DATA_DIR": str(tmp_path), name: value})
        err = out.stderr.decode()
        assert out.returncode == 2, err
        assert f"{name}='{value}'" in err and "Input should be" in err and "Traceback" not in err

"""Every door reads a trace the same way (serve/intake.py): ``triage diagnose`` (a real subprocess),
``POST /v1/diagnose`` and the heavy lane's helper process give the same diagnosis, or the same
error, for the documented examples, the importers' fixtures, the traces recorded from the
instrumentation libraries and a set of bad bodies; spans of several traces naming no session are
diagnosed as one run, with a warning, at every door."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from serve.app import create_app
from serve.settings import Settings
from tests.conftest import FIXTURES, ROOT
from tests.spanfix import otlp, span


def _record(path: Path, *, session: bool = True) -> bytes:
    """A recorded library trace as a request body: the trace, with the recording's options."""
    rec = json.loads(path.read_text(encoding="utf-8"))
    options = (rec.get("options") or {}) if session else {}
    return json.dumps({"trace": rec["trace"], "options": options}).encode()


#: Two runs: a trace of session ``conv-42`` and one naming none (the importers' OTLP fixture).
SEVERAL = FIXTURES / "importers" / "otel_otlp.json"


def _bodies() -> dict[str, bytes]:
    out = {f"examples/{p.name}": p.read_bytes() for p in sorted((ROOT / "docs/examples").glob("*.json"))}
    out |= {f"importers/{p.name}": p.read_bytes() for p in sorted((FIXTURES / "importers").glob("*.json"))
            if p.name != SEVERAL.name}
    out |= {f"integrations/{p.name}": _record(p) for p in sorted((FIXTURES / "integrations").glob("*.json"))}
    return out


BODIES = _bodies()
#: A client-only instrumentation's run: one trace per LLM call, no session attribute (LiteLLM's
#: OTel callback, recorded; its record names the run with options.session, left out here).
UNKEYED = _record(FIXTURES / "integrations" / "litellm-otel.json", session=False)


def _keyed(session: str | None) -> list[dict[str, Any]]:
    attrs: dict[str, Any] = {"gen_ai.operation.name": "chat",
                             "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [
                                 {"type": "text", "content": "hi"}]}]),
                             "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                                 {"type": "text", "content": "hello"}]}])}
    if session:
        attrs["gen_ai.conversation.id"] = session
    return [span(("a" if session else "b") * 32, "c" * 16, "chat", 1.0, attrs)]


HELLO = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}

#: Bodies every door refuses, each for its own reason.
BAD: dict[str, bytes] = {
    "truncated JSON": b'{"messages": [{"role": "user", "content": "hi"}',
    "not a trace": json.dumps({"colour": "red"}).encode(),
    "unknown role": json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "robot", "content": "x"}]}
                               ).encode(),
    "unknown format": json.dumps({"trace": HELLO, "format": "yaml"}).encode(),
    "unknown envelope key": json.dumps({"trace": HELLO, "colour": "red"}).encode(),
    "NUL in text": json.dumps({"messages": [{"role": "user", "content": "a\u0000b"}]}).encode(),
    "no such session": json.dumps({"trace": otlp(_keyed("conv-a")), "options": {"session": "conv-z"}}).encode(),
    "too many steps": json.dumps([{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"}
                                  for i in range(5001)]).encode(),
}


def _app(path: Path, **settings: Any) -> Iterator[TestClient]:
    app = create_app(Settings(data_dir=path, classifier=False, auth="off", **settings))
    with TestClient(app) as client:
        yield client


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    yield from _app(tmp_path_factory.mktemp("http"))


@pytest.fixture(scope="module")
def heavy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """Every body goes to the helper process (the lane's threshold at 1 byte)."""
    yield from _app(tmp_path_factory.mktemp("heavy"), heavy_body_bytes=1)


def _cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "serve.cli.main", "diagnose", "--no-classifier", *args],
                          cwd=ROOT, capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """What ``triage diagnose`` gives for each body: one process, the bodies as the lines of an
    archive (``--jsonl``: each line read by the same intake as a file is)."""
    folder = tmp_path_factory.mktemp("cli")
    names = [*BODIES, *BAD]
    lines = [json.dumps(json.loads((BODIES | BAD)[n])) if n != "truncated JSON" else BAD[n].decode() for n in names]
    src = folder / "in.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = folder / "out.jsonl"
    r = _cli("--jsonl", str(src), "--out", str(out))
    assert r.returncode == 2, r.stderr.decode()  # the bad lines
    rows = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == len(names)  # one run a line
    return dict(zip(names, rows, strict=True))


def _same(resp: dict[str, Any], *, strategy: bool = True) -> dict[str, Any]:
    """What must not depend on the door (the recommended ``strategy`` too, unless told)."""
    return {
        "steps": resp["steps"], "healthy": resp["healthy"], "coverage": resp["coverage"],
        "warnings": resp["warnings"],
        "failures": [(f["kind"], f["step"], f["source_index"], f["confidence"], f["detectors"])
                     for f in resp["failures"]],
        "signals": [(f["kind"], f["step"], f["source_index"], f["confidence"]) for f in resp["signals"]],
        "primary": None if resp["primary"] is None else (resp["primary"]["kind"], resp["primary"]["step"]),
        "strategy": resp["recommendation"]["strategy"] if strategy else None,
        "failure_probability": resp["failure_probability"],
    }


def _on_primary(resp: dict[str, Any]) -> bool:
    """Whether the service's recommendation acts on the primary failure. The service's comes from
    the repair engine, which may act on another failure (its rationale names it); the CLI's is
    always the primary's ladder, so the two strategies are compared where the engine took it."""
    return resp["primary"] is None or str(resp["recommendation"]["rationale"]).startswith(resp["primary"]["kind"])


@pytest.mark.parametrize("name", sorted(BODIES))
def test_every_door_gives_the_same_diagnosis(
    name: str, http: TestClient, heavy: TestClient, cli: dict[str, dict[str, Any]]
) -> None:
    body = BODIES[name]
    a = http.post("/v1/diagnose", content=body, headers={"Content-Type": "application/json"})
    assert a.status_code == 200, a.text
    b = heavy.post("/v1/diagnose", content=body, headers={"Content-Type": "application/json"})
    assert b.status_code == 200, b.text
    assert "error" not in cli[name], cli[name]
    assert _same(a.json()) == _same(b.json())
    both = _on_primary(a.json())
    assert _same(a.json(), strategy=both) == _same(cli[name], strategy=both)


@pytest.mark.parametrize("name", sorted(BAD))
def test_every_door_refuses_the_same_bodies(
    name: str, http: TestClient, heavy: TestClient, cli: dict[str, dict[str, Any]]
) -> None:
    body = BAD[name]
    a = http.post("/v1/diagnose", content=body, headers={"Content-Type": "application/json"})
    b = heavy.post("/v1/diagnose", content=body, headers={"Content-Type": "application/json"})
    assert a.status_code in (413, 422), a.text
    assert (b.status_code, b.json()) == (a.status_code, a.json())
    first = a.json()["detail"][0]
    error = cli[name]["error"]
    assert re.sub(r"^line \d+: ", "", first["msg"]) in error, (first, error)  # the CLI's line: the archive's
    assert all(str(part) in error for part in first["loc"][1:]), (first, error)


def test_input_still_holding_several_runs(http: TestClient, heavy: TestClient) -> None:
    """A session's trace beside one naming none: the HTTP doors refuse it, listing the runs and
    naming ``options.session``; the CLI diagnoses each run (README: "the CLI diagnoses each")."""
    body = SEVERAL.read_bytes()
    a = http.post("/v1/diagnose", content=body, headers={"Content-Type": "application/json"})
    assert a.status_code == 422, a.text
    msg = a.json()["detail"][0]["msg"]
    assert "expected one run, got 2" in msg and "options.session" in msg
    b = heavy.post("/v1/diagnose", content=body, headers={"Content-Type": "application/json"})
    assert (b.status_code, b.json()) == (a.status_code, a.json())
    r = _cli(str(SEVERAL), "--json")
    assert r.returncode == 0, r.stderr.decode()
    each = json.loads(r.stdout)
    assert isinstance(each, list) and [x["steps"] > 0 for x in each] == [True, True]
    one = http.post("/v1/diagnose", content=body, params={"session": "conv-42"},
                    headers={"Content-Type": "application/json"})
    assert one.status_code == 200, one.text


def test_several_traces_without_a_session_are_one_run_with_a_warning_at_every_door(
    http: TestClient, heavy: TestClient, cli: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    a = http.post("/v1/diagnose", content=UNKEYED, headers={"Content-Type": "application/json"})
    assert a.status_code == 200, a.text
    b = heavy.post("/v1/diagnose", content=UNKEYED, headers={"Content-Type": "application/json"})
    assert b.status_code == 200, b.text
    f = tmp_path / "unkeyed.json"
    f.write_bytes(UNKEYED)
    r = _cli(str(f), "--json")
    assert r.returncode == 0, r.stderr.decode()
    c = json.loads(r.stdout)
    for resp in (a.json(), b.json(), c):
        assert "gen_ai.conversation.id" in resp["warnings"][0] and "session.id" in resp["warnings"][0]
    assert _same(a.json()) == _same(b.json())
    both = _on_primary(a.json())
    assert _same(a.json(), strategy=both) == _same(c, strategy=both)
    # the run the recording's session option names: same steps, same failures, one warning more
    named = cli["integrations/litellm-otel.json"]
    assert named["warnings"] == c["warnings"][1:]
    assert _same(named) | {"warnings": []} == _same(c) | {"warnings": []}

"""The heavy lane (serve/heavy.py): a large /v1/diagnose body is served by the worker's helper
process with the same answer, storage and errors as the worker itself gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from model.data.builder import make_trace
from model.diagnosis.diagnoser import Diagnoser
from serve.app import create_app
from serve.settings import Settings


def _body(trace_id: str) -> dict[str, Any]:
    t = make_trace("loop", seed=4, n_steps=30)
    t.id = trace_id
    t.labels = None
    return {"trace": t.model_dump(mode="json", exclude_none=True)}


def test_large_bodies_go_to_the_helper_process(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, classifier=False, auth="off", heavy_body_bytes=4096)
    app = create_app(settings)
    big = _body("big-1")
    small = {"trace": {"steps": [{"kind": "user_input", "content": "hi"}], "id": "small-1"}}
    with TestClient(app) as c:
        r = c.post("/v1/diagnose", json=small)
        assert r.status_code == 200 and app.state.heavy._pool is None  # small: the worker itself
        r = c.post("/v1/diagnose", json=big)
        assert r.status_code == 200, r.text
        assert app.state.heavy._pool is not None  # served by the helper
        got = r.json()
        from model.core.schema import Trace

        want = Diagnoser().diagnose(Trace.model_validate(big["trace"]))
        assert got["primary"]["kind"] == want.primary.kind.value == "loop"
        assert got["primary"]["step"] == want.primary.step
        assert got["trace_id"] == "big-1"
        # stored by the helper, read by the worker
        assert c.get("/v1/traces/big-1").json()["steps"] == len(big["trace"]["steps"])
        # errors come back as the worker would give them
        bad = {**big, "format": "nope"}
        r = c.post("/v1/diagnose", json=bad)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] == ["body", "format"]
        broken = _body("big-2")
        broken["trace"]["steps"][3]["kind"] = "dancing"
        r = c.post("/v1/diagnose", json=broken)
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"][:3] == ["body", "trace", "steps"]
        r = c.post("/v1/diagnose", content=b"{" * 5000 + b"}" * 5000)
        assert r.status_code == 422
        too_many = _body("big-3")
        too_many["trace"]["steps"] = too_many["trace"]["steps"] * 200
        r = c.post("/v1/diagnose", json=too_many)
        assert r.status_code == 413, r.text

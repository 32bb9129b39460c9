"""The canary share (serve/services/canary.py): arms by a hash of tenant and session id, shadow for the
rest, the arm in the response, and per-arm failure / recovery / task-success figures in /metrics,
scoped per tenant — against real ``triage serve`` processes on SQLite and on PostgreSQL."""

from __future__ import annotations

import doctest
import subprocess
import sys
from datetime import timedelta
from itertools import count
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

import serve.services.canary as canary_module
import serve.store.verdict as verdict_module
from serve.auth import create_key
from serve.services.canary import BUCKETS, assign_arm, bucket, median_recovery_s
from serve.settings import Settings
from serve.store import Stores
from tests.conftest import ROOT, LiveServer
from tests.storefix import db_url  # noqa: F401  (fixture)


# -- assignment ------------------------------------------------------------------------------------
def test_buckets_are_the_same_in_another_process() -> None:
    ids = [f"conv-{i}" for i in range(20)]
    code = (
        "from serve.services.canary import bucket; "
        f"print(' '.join(str(bucket('acme', s)) for s in {ids!r}))"
    )
    # PYTHONHASHSEED differs: Python's own hash() would give other values there
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"},
    ).stdout.split()
    assert [int(b) for b in out] == [bucket("acme", s) for s in ids]
    # and across releases: the algorithm (SHA-256 of tenant \x1f session, first 8 bytes) is fixed
    assert bucket("acme", "conv-0") == int.from_bytes(
        __import__("hashlib").sha256(b"acme\x1fconv-0").digest()[:8], "big"
    ) % BUCKETS


def test_share_tenant_and_monotone_in_the_percent() -> None:
    ids = [f"s{i}" for i in range(4000)]
    at30 = {s for s in ids if assign_arm("acme", s, 30.0) == "repair"}
    at60 = {s for s in ids if assign_arm("acme", s, 60.0) == "repair"}
    # binomial(4000, p): sd 0.7-0.8 points; 3 points is > 4 sd
    assert abs(len(at30) / len(ids) - 0.30) < 0.03 and abs(len(at60) / len(ids) - 0.60) < 0.03
    assert at30 <= at60  # raising the share only moves shadow sessions into repair
    assert {s for s in ids if assign_arm("acme", s, 100.0) == "repair"} == set(ids)
    assert {s for s in ids if assign_arm("acme", s, 0.0) == "repair"} == set()
    # the tenant is part of the key: the same session ids split differently for another tenant
    other = {s for s in ids if assign_arm("globex", s, 30.0) == "repair"}
    assert other != at30 and abs(len(other) / len(ids) - 0.30) < 0.03


def test_the_setting_is_a_percent() -> None:
    assert Settings().repair_canary_percent == 100.0
    for bad in (-1, 100.5):
        with pytest.raises(ValidationError, match="repair_canary_percent"):
            Settings(repair_canary_percent=bad)


def test_the_window_setting_and_the_median() -> None:
    assert Settings().canary_window == timedelta(days=7)
    assert Settings(canary_window="36h").canary_window == timedelta(hours=36)
    assert Settings(canary_window="P2D").canary_window == timedelta(days=2)
    for bad in ("30m", "soon"):
        with pytest.raises(ValidationError, match="canary_window"):
            Settings(canary_window=bad)
    for module in (canary_module, verdict_module):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0
    assert median_recovery_s([1, 1, 1, 1, 1, 1, 1, 1], 3) == 86400.0  # beyond the last bound: the last bound


# -- end to end -----------------------------------------------------------------------------------
USER = {"role": "user", "content": "What's the weather in Paris?"}
ANSWER = {"role": "assistant", "content": "It is 18 C and sunny in Paris."}


def _call(i: int) -> dict[str, Any]:
    fn = {"name": "weather", "arguments": '{"city": "Paris"}'}
    return {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function", "function": fn}]}


def _result(i: int, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"c{i}", "content": content}


def _ids(tenant: str, arm: str, n: int, percent: float, prefix: str) -> list[str]:
    """The first ``n`` session ids ``prefix-<i>`` that the hash puts in ``arm`` (the server must agree)."""
    out: list[str] = []
    for i in count():
        if assign_arm(tenant, f"{prefix}-{i}", percent) == arm:
            out.append(f"{prefix}-{i}")
            if len(out) == n:
                break
    return out


class Agent:
    """Posts one run's messages to a session, one append per message, as an agent would."""

    def __init__(self, base: str, key: str) -> None:
        self.base = base
        self.h = {"Authorization": f"Bearer {key}"}

    def append(self, session: str, message: dict[str, Any], **options: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"messages": [message]}
        if options:
            body["options"] = options
        r = httpx.post(f"{self.base}/v1/sessions/{session}/steps", json=body, headers=self.h, timeout=60)
        assert r.status_code == 200, r.text
        return dict(r.json())

    def run(self, session: str, *, fail: bool, recover: bool, **options: Any) -> list[dict[str, Any]]:
        """A weather lookup: ok, or a 503 (then a retry that works when ``recover``)."""
        out = [self.append(session, USER, **options), self.append(session, _call(0), **options)]
        out.append(self.append(session, _result(0, "HTTP 503 Service Unavailable" if fail else "18 C, sunny"), **options))
        if fail and recover:
            out.append(self.append(session, _call(1), **options))
            out.append(self.append(session, _result(1, "18 C, sunny"), **options))
        if not fail or recover:
            out.append(self.append(session, ANSWER, **options))
        return out

    def label(self, trace_id: str, failed: bool, author_type: str = "checker") -> None:
        r = httpx.post(
            f"{self.base}/v1/traces/{trace_id}/labels",
            json={"failed": failed, "author": "agent" if author_type == "checker" else "ann", "author_type": author_type},
            headers=self.h,
            timeout=30,
        )
        assert r.status_code == 200, r.text

    def metrics(self) -> dict[str, dict[str, float]]:
        r = httpx.get(f"{self.base}/metrics", headers=self.h, timeout=30)
        assert r.status_code == 200, r.text
        out: dict[str, dict[str, float]] = {}
        for fam in text_string_to_metric_families(r.text):
            if fam.name.startswith("triage_canary") or fam.name == "triage_repair_canary_percent":
                for s in fam.samples:
                    if s.name.endswith("_created"):
                        continue
                    out.setdefault(s.name, {})[s.labels.get("arm", "")] = s.value
        return out


def _server(url: str, data: Any, percent: float) -> LiveServer:
    return LiveServer(
        env={
            "TRIAGE_DATA_DIR": str(data),
            "TRIAGE_DATABASE_URL": url,
            "TRIAGE_AUTH": "on",
            "TRIAGE_AUTH_CACHE_S": "0",
            "TRIAGE_OPERATOR_TENANTS": "ops",
            "TRIAGE_CLASSIFIER": "false",  # rules decide the 503s: exact figures
            "TRIAGE_REPAIR_CANARY_PERCENT": str(percent),
        }
    ).wait_ready()


@pytest.mark.slow
def test_canary_arms_end_to_end(db_url: str, tmp_path: Any) -> None:  # noqa: F811
    store = Stores.at(db_url)
    store.db.upgrade()
    keys = {t: create_key(store.keys, t)[0] for t in ("acme", "globex", "ops")}
    store.db.dispose()
    acme_repair = _ids("acme", "repair", 3, 40.0, "conv")
    acme_shadow = _ids("acme", "shadow", 3, 40.0, "conv")
    srv = _server(db_url, tmp_path, 40.0)
    try:
        acme, globex, ops = (Agent(srv.url, keys[t]) for t in ("acme", "globex", "ops"))
        # repair arm: a 503 the retry got past; a 503 left as it is
        r1 = acme.run(acme_repair[0], fail=True, recover=True)
        assert {d["arm"] for d in r1} == {"repair"}
        assert r1[2]["recommendation"]["strategy"] == "retry" and r1[2]["primary"]["kind"] == "tool_error"
        assert r1[-1]["healthy"] is True
        r2 = acme.run(acme_repair[1], fail=True, recover=False)
        assert r2[-1]["recommendation"]["strategy"] == "retry"
        # shadow arm: the same failures are diagnosed, recorded, and answered `continue`
        s1 = acme.run(acme_shadow[0], fail=True, recover=True)
        assert {d["arm"] for d in s1} == {"shadow"}
        assert s1[2]["primary"]["kind"] == "tool_error" and s1[2]["healthy"] is False
        assert s1[2]["recommendation"]["strategy"] == "continue"
        assert s1[2]["recommendation"]["rationale"].startswith("shadow mode: tool_error at step 2")
        s2 = acme.run(acme_shadow[1], fail=True, recover=False)
        s3 = acme.run(acme_shadow[2], fail=False, recover=False)
        assert s3[-1]["healthy"] is True
        # a repair-arm session whose caller asks for shadow itself: shadow, counted in neither arm
        own = acme.run(acme_repair[2], fail=True, recover=False, shadow=True)
        assert {d["arm"] for d in own} == {"shadow"} and own[-1]["recommendation"]["strategy"] == "continue"
        # a trace without a session id is its own session: trace:<id>
        trace = {"id": "whole-1", "steps": [
            {"kind": "user_input", "content": "Weather in Paris?"},
            {"kind": "tool_call", "tool_name": "weather", "call_id": "w", "tool_args": {"city": "Paris"}},
            {"kind": "tool_result", "tool_name": "weather", "call_id": "w", "status": "error",
             "content": "HTTP 503 Service Unavailable"},
        ]}
        d = httpx.post(f"{srv.url}/v1/diagnose", json={"trace": trace}, headers=acme.h, timeout=60).json()
        assert d["arm"] == assign_arm("acme", "trace:whole-1", 40.0)
        assert (d["recommendation"]["strategy"] == "retry") == (d["arm"] == "repair")
        whole_arm = d["arm"]
        # another tenant's run
        globex.run("g-1", fail=True, recover=False)

        # task success: the agent's own verdict (a checker label); a human's label outranks it
        acme.label(r1[-1]["trace_id"], failed=False)
        acme.label(r2[-1]["trace_id"], failed=True)
        acme.label(s1[-1]["trace_id"], failed=False)
        acme.label(s2[-1]["trace_id"], failed=False)
        acme.label(s2[-1]["trace_id"], failed=True, author_type="human")
        acme.label(own[-1]["trace_id"], failed=True)  # in neither arm

        m = acme.metrics()
        extra = {"repair": 1, "shadow": 0} if whole_arm == "repair" else {"repair": 0, "shadow": 1}
        assert m["triage_repair_canary_percent"] == {"": 40.0}
        assert m["triage_canary_runs"] == {"repair": 2 + extra["repair"], "shadow": 3 + extra["shadow"]}
        assert m["triage_canary_failed_runs"] == {"repair": 2 + extra["repair"], "shadow": 2 + extra["shadow"]}
        assert m["triage_canary_recovered_runs"] == {"repair": 1, "shadow": 1}
        assert m["triage_canary_labelled_runs"] == {"repair": 2, "shadow": 2}
        assert m["triage_canary_succeeded_runs"] == {"repair": 1, "shadow": 1}
        assert m["triage_canary_task_success_ratio"] == {"repair": 0.5, "shadow": 0.5}
        assert m["triage_canary_recovery_ratio"] == {
            "repair": 1 / (2 + extra["repair"]), "shadow": 1 / (2 + extra["shadow"])
        }
        assert m["triage_canary_failure_ratio"]["shadow"] == pytest.approx((2 + extra["shadow"]) / (3 + extra["shadow"]))
        # over the default window; the time to recovery of the two recovered runs (a few seconds each)
        assert m["triage_canary_window_seconds"] == {"": 7 * 86400.0}
        assert m["triage_canary_recovery_seconds_count"] == {"repair": 1, "shadow": 1}
        assert all(0 < v <= 10 for v in m["triage_canary_median_recovery_seconds"].values())
        assert len(m["triage_canary_median_recovery_seconds"]) == 2
        # scoped as the other metrics: globex sees its own run only, the operator every tenant's
        g = globex.metrics()
        g_arm = assign_arm("globex", "g-1", 40.0)
        assert g["triage_canary_runs"] == {g_arm: 1, ("shadow" if g_arm == "repair" else "repair"): 0}
        assert g["triage_canary_recovery_ratio"] == {g_arm: 0.0}  # no runs in the other arm: no rate
        o = ops.metrics()
        assert sum(o["triage_canary_runs"].values()) == 7  # acme 6, globex 1
    finally:
        srv.stop()

    # A restart with another share: running sessions keep their arm, new ones follow the new share.
    srv = _server(db_url, tmp_path, 100.0)
    try:
        acme = Agent(srv.url, keys["acme"])
        again = acme.append(acme_shadow[0], {"role": "user", "content": "And tomorrow?"})
        assert again["arm"] == "shadow" and again["recommendation"]["strategy"] == "continue"
        fresh = acme.run(acme_shadow[0] + "-new", fail=True, recover=False)
        assert {d["arm"] for d in fresh} == {"repair"} and fresh[-1]["recommendation"]["strategy"] == "retry"
        assert acme.metrics()["triage_repair_canary_percent"] == {"": 100.0}
    finally:
        srv.stop()

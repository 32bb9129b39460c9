"""One answer, decided once (:meth:`model.diagnosis.diagnoser.Diagnoser.decide`).

- The primary failure follows one rule (:func:`model.core.findings.precedence`): a failure of lower
  severity at an earlier step, or of equal severity at a later step — from a rule, from the agent
  model's early warning (``at_risk``) or from a stream alarm — never moves it; the recommendation
  addresses it.
- Every door gives the same answer: ``triage diagnose``, ``POST /v1/diagnose``, the heavy lane and the
  console's run page, for every file in ``docs/examples/`` and every recorded library trace, each on a
  fresh tenant (failures, signals, primary, ``failure_probability`` to 1e-9, attribution, the
  recommendation but its ``id``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any, ClassVar

import httpx
import pytest

from model.core.findings import Failure, Finding, precedence
from model.core.kinds import FailureKind
from model.core.schema import Trace
from model.diagnosis.agent_answer import ServedAgent
from model.diagnosis.decision import Context
from model.diagnosis.diagnoser import Diagnoser
from model.diagnosis.repair_engine import failure_key
from model.importers import load_trace
from model.scoring.agentmodel.cheap import CheapModel
from serve.auth import create_key
from serve.store import Stores
from tests.conftest import FIXTURES, ROOT, LiveServer

EXAMPLES = sorted((ROOT / "docs" / "examples").glob("*.json"))
RECORDED = sorted((FIXTURES / "integrations").glob("*.json"))


def _loop() -> Trace:
    body = json.loads((ROOT / "docs" / "examples" / "loop.json").read_text(encoding="utf-8"))
    return load_trace(body["trace"], format=body["format"])


# -- the primary does not move ------------------------------------------------------------------------

class Planted:
    """A rule that reports one finding of ``kind`` at ``step`` (the trace detector protocol)."""

    name: ClassVar[str] = "planted"
    version: ClassVar[str] = "1"
    kinds: ClassVar[tuple[FailureKind, ...]] = tuple(FailureKind)

    def __init__(self, kind: FailureKind, step: int) -> None:
        self.kind, self.step = kind, step

    def inspect(self, trace: Trace) -> list[Finding]:
        st = trace.steps[self.step]
        return [Finding(detector=self.name, kind=self.kind, confidence=0.9, step=self.step,
                        source_index=st.source_index, evidence=f"planted at step {self.step}")]

    def get_params(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "step": self.step}


def _rules(*extra: Any) -> Diagnoser:
    base = Diagnoser()
    return Diagnoser([*base.detectors.values(), *extra])


def _warning_at(trace: Trace, step: int) -> ServedAgent:
    """A real served model (the length fit) whose prefix score first reaches its early-warning
    point at ``step``: P(failed) grows with the messages read; the point is the score there."""
    model = CheapModel("length", {"coef": [3.0, 0.0], "intercept": -6.0}, card={"labelled_runs": 40})
    st = model.start()
    scores = []
    for s in trace.steps:
        st.add(s)
        scores.append(model.score_state(st))
    assert scores[step] > scores[step - 1], "the planted model must cross exactly there"
    model.at_risk_threshold = scores[step]
    return ServedAgent("t", "bot", "bot", "1", model)


def _alarm() -> Finding:
    """A stream alarm's finding as :meth:`serve.services.streams.Streams.degradation_findings` gives it."""
    return Finding(detector="stream:cusum", kind=FailureKind.DEGRADATION, confidence=1.0,
                   evidence="stream 'tool_calls' of agent 'bot' drifted up from observation 40 (alarm at 52)",
                   details={"stream": "tool_calls", "agent": "bot", "beyond": True})


def _answer(d: Diagnoser, trace: Trace, **ctx: Any) -> tuple[Failure, str | None, list[Failure]]:
    resp = d.decide(trace, Context(**ctx)).response
    assert resp.primary is not None
    return resp.primary, resp.recommendation.addresses, resp.failures


def test_loop_json_primary_and_recommendation_agree() -> None:
    primary, addresses, failures = _answer(Diagnoser(), _loop())
    assert primary.kind is FailureKind.LOOP and {f.kind for f in failures} >= {FailureKind.LOOP, FailureKind.INCOMPLETE}
    assert addresses == failure_key(primary)
    rec = Diagnoser().diagnose(_loop()).recommendation
    assert rec.strategy.value == "rollback" and "retry" not in rec.instruction.lower()


@pytest.mark.parametrize("source", ["rule", "at_risk", "stream"])
def test_a_lower_severity_failure_earlier_does_not_move_the_loop(source: str) -> None:
    trace = _loop()
    base, _, _ = _answer(Diagnoser(), trace)
    assert base.kind is FailureKind.LOOP and base.severity.value == "high"
    if source == "rule":
        primary, addresses, failures = _answer(_rules(Planted(FailureKind.TIMEOUT, 2)), trace)
        added = FailureKind.TIMEOUT
    elif source == "at_risk":
        primary, addresses, failures = _answer(Diagnoser(), trace, served=_warning_at(trace, 2), agent="bot")
        added = FailureKind.AT_RISK
    else:
        primary, addresses, failures = _answer(Diagnoser(), trace, alarms=[_alarm()])
        added = FailureKind.DEGRADATION
    new = next(f for f in failures if f.kind is added)
    assert new.severity.rank < base.severity.rank
    assert base.step is not None and (new.step is None or new.step < base.step)  # a stream alarm: no step
    assert (primary.kind, primary.step) == (base.kind, base.step)
    assert addresses == failure_key(base)


def test_an_equal_severity_rule_failure_later_does_not_move_the_loop() -> None:
    trace = _loop()
    trace.steps.append(trace.steps[-1].model_copy(update={"source_index": trace.steps[-1].source_index + 1}))
    base, _, _ = _answer(Diagnoser(), trace)
    assert base.kind is FailureKind.LOOP
    primary, addresses, failures = _answer(_rules(Planted(FailureKind.TOOL_ERROR, len(trace.steps) - 1)), trace)
    new = next(f for f in failures if f.kind is FailureKind.TOOL_ERROR)
    assert new.severity == base.severity and new.step is not None and base.step is not None and new.step > base.step
    assert (primary.kind, primary.step) == (base.kind, base.step) and addresses == failure_key(base)


@pytest.mark.parametrize("source", ["rule", "at_risk", "stream"])
def test_an_equal_severity_failure_later_does_not_move_a_medium_primary(source: str) -> None:
    """``at_risk`` and ``degradation`` are medium: their equal-severity case is a medium primary."""
    from model.data.builder import make_trace

    trace = make_trace(FailureKind.MALFORMED_CALL, seed=0)
    base, _, _ = _answer(Diagnoser(), trace)
    assert base.kind is FailureKind.MALFORMED_CALL and base.severity.value == "medium"
    assert base.step is not None and base.step < len(trace.steps) - 1
    last = len(trace.steps) - 1
    if source == "rule":
        primary, addresses, failures = _answer(_rules(Planted(FailureKind.REFUSAL, last)), trace)
        added = FailureKind.REFUSAL
    elif source == "at_risk":
        primary, addresses, failures = _answer(Diagnoser(), trace, served=_warning_at(trace, last), agent="bot")
        added = FailureKind.AT_RISK
    else:
        primary, addresses, failures = _answer(Diagnoser(), trace, alarms=[_alarm()])
        added = FailureKind.DEGRADATION
    new = next(f for f in failures if f.kind is added)
    assert new.severity == base.severity and precedence(new) > precedence(base)
    assert (primary.kind, primary.step) == (base.kind, base.step) and addresses == failure_key(base)


# -- every door gives the same answer ---------------------------------------------------------------

def _bodies() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for p in EXAMPLES:
        out.append((f"example:{p.name}", json.loads(p.read_text(encoding="utf-8"))))
    for p in RECORDED:
        rec = json.loads(p.read_text(encoding="utf-8"))
        out.append((f"recorded:{p.name}", {"trace": rec["trace"], "options": rec.get("options") or {}}))
    return out


BODIES = _bodies()
#: the heavy lane serves bodies this large or larger; every body posted to it is padded past it
HEAVY_BYTES = 256 * 1024


def _same(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """What differs between two answers, on the fields every door must agree on."""
    diff: dict[str, Any] = {}
    for field in ("failures", "signals", "primary", "attribution"):
        if a.get(field) != b.get(field):
            diff[field] = (a.get(field), b.get(field))
    pa, pb = a.get("failure_probability"), b.get("failure_probability")
    if (pa is None) != (pb is None) or (pa is not None and abs(pa - pb) > 1e-9):
        diff["failure_probability"] = (pa, pb)
    ra = {k: v for k, v in (a.get("recommendation") or {}).items() if k != "id"}
    rb = {k: v for k, v in (b.get("recommendation") or {}).items() if k != "id"}
    if ra != rb:
        diff["recommendation"] = (ra, rb)
    return diff


@pytest.fixture(scope="module")
def doors(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("doors")
    store = Stores.at(f"sqlite:///{work / 'triage.db'}")
    store.db.upgrade()
    keys = {(lane, i): create_key(store.keys, f"{lane}{i}")[0] for lane in ("http", "heavy") for i in range(len(BODIES))}
    store.db.dispose()
    lines = work / "bodies.jsonl"
    lines.write_text("".join(json.dumps(body) + "\n" for _, body in BODIES), encoding="utf-8")
    out = work / "cli.jsonl"
    cli = subprocess.run([sys.executable, "-m", "serve.cli.main", "diagnose", "--jsonl", str(lines), "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    server = LiveServer(env={"TRIAGE_DATA_DIR": str(work), "TRIAGE_AUTH": "on",
                             "TRIAGE_HEAVY_BODY_BYTES": str(HEAVY_BYTES)}).wait_ready()
    try:
        yield {"url": server.url, "keys": keys,
               "cli": [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]}
    finally:
        server.stop()


@pytest.mark.parametrize("i", range(len(BODIES)), ids=[name for name, _ in BODIES])
def test_every_door_gives_the_same_answer(doors: dict[str, Any], i: int) -> None:
    name, body = BODIES[i]
    cli = doors["cli"][i]
    assert "error" not in cli, cli
    raw = json.dumps(body).encode()
    assert len(raw) < HEAVY_BYTES, f"{name}: the plain lane must take it"
    http = httpx.post(f"{doors['url']}/v1/diagnose", content=raw, timeout=120,
                      headers={"Authorization": f"Bearer {doors['keys']['http', i]}", "content-type": "application/json"})
    assert http.status_code == 200, http.text
    padded = raw + b" " * (HEAVY_BYTES - len(raw))
    heavy = httpx.post(f"{doors['url']}/v1/diagnose", content=padded, timeout=120,
                       headers={"Authorization": f"Bearer {doors['keys']['heavy', i]}", "content-type": "application/json"})
    assert heavy.status_code == 200, heavy.text
    c = httpx.Client(base_url=doors["url"], timeout=60)
    assert c.post("/ui/signin", data={"key": doors["keys"]["http", i], "next": "/ui/runs"}).status_code == 303
    page = c.get(f"/ui/runs/{http.json()['trace_id']}", params={"format": "json"})
    assert page.status_code == 200, page.text
    answers = {"http": http.json(), "heavy lane": heavy.json(), "console": page.json()}
    for door, answer in answers.items():
        assert _same(cli, answer) == {}, f"{name}: triage diagnose and {door} differ"
    primary = cli["primary"]
    if primary is not None:  # the recommendation addresses the primary failure (a new run: none is resolved)
        index = "-" if primary["source_index"] is None else primary["source_index"]
        assert cli["recommendation"]["addresses"] == f"{primary['kind']}@{index}"
    else:
        assert cli["recommendation"]["strategy"] == "continue" and cli["recommendation"]["addresses"] is None


def test_the_doors_cover_the_examples_and_every_recorded_library() -> None:
    assert len(EXAMPLES) >= 3 and len(RECORDED) >= 17
    assert any(body.get("trace") and name == "example:loop.json" for name, body in BODIES)


def test_a_request_naming_an_opt_in_detector_leaves_the_default_set_as_it_was() -> None:
    from model.core.options import DiagnoseOptions

    d = Diagnoser()
    before = set(d.detectors)
    named = d.diagnose(_loop(), DiagnoseOptions(detectors=["classifier", "loop"]))
    assert set(named.detector_versions) == {"classifier", "loop"}
    assert set(d.detectors) == before and "classifier" not in d.diagnose(_loop()).detector_versions


def test_a_trace_posted_again_is_decided_on_its_stored_repair_state(tmp_path: Any) -> None:
    """The decision runs before the write transaction, on the repair state as read; a trace id posted
    again after a failed outcome finds its own stored state in the transaction and is decided again
    on it: the standing next rung, not the first rung again."""
    from model.core.options import DiagnoseOptions
    from serve.schemas import OutcomeRequest
    from serve.settings import Settings
    from serve.wiring import build_service

    svc = build_service(Settings(data_dir=tmp_path), Diagnoser())
    try:
        first = svc.diagnose("acme", _loop(), DiagnoseOptions())
        assert first.recommendation.strategy.value == "rollback"
        out = svc.report_outcome("acme", OutcomeRequest(recommendation_id=first.recommendation.id, success=False))
        assert out.next is not None
        again = svc.diagnose("acme", _loop().model_copy(update={"id": first.trace_id}), DiagnoseOptions())
        assert again.recommendation.id == out.next.id != first.recommendation.id
        assert again.recommendation.strategy == out.next.strategy
        assert again.recommendation.addresses == first.recommendation.addresses == "loop@6"
    finally:
        svc.stores.db.dispose()


def test_a_state_that_moved_after_it_was_read_is_decided_again_in_the_transaction(tmp_path: Any) -> None:
    """The repair state read before the decision can be stale by the time the transaction locks it
    (an outcome of the same run committed in between): the locked state wins. The race is pinned
    by reading the state before the outcome (the store, engine and service are the real ones)."""
    from model.core.options import DiagnoseOptions
    from serve.schemas import OutcomeRequest
    from serve.settings import Settings
    from serve.wiring import build_service

    svc = build_service(Settings(data_dir=tmp_path), Diagnoser())
    try:
        first = svc.diagnose("acme", _loop(), DiagnoseOptions())
        again = _loop().model_copy(update={"id": first.trace_id})
        store = svc.diagnoses.trace_store
        before = store.stored_run("acme", again.id)  # read here ...
        out = svc.report_outcome("acme", OutcomeRequest(recommendation_id=first.recommendation.id, success=False))
        assert out.next is not None and before is not None
        store.stored_run = lambda tenant, trace_id: before  # type: ignore[method-assign]  # ... used after
        resp = svc.diagnose("acme", again, DiagnoseOptions())
        assert resp.recommendation.id == out.next.id != first.recommendation.id
    finally:
        svc.close()


def test_a_run_read_as_new_whose_row_came_meanwhile_is_decided_again_on_it(tmp_path: Any) -> None:
    """A run read as new is inserted without a lock (``put_trace(only_new=True)``); when another request
    stored the same id between that read and the transaction, the insert writes nothing and the row is
    locked, and the decision made on no state is made again on the row's (the race pinned as above)."""
    from model.core.options import DiagnoseOptions
    from serve.schemas import OutcomeRequest
    from serve.settings import Settings
    from serve.wiring import build_service

    svc = build_service(Settings(data_dir=tmp_path), Diagnoser())
    try:
        first = svc.diagnose("acme", _loop(), DiagnoseOptions())
        out = svc.report_outcome("acme", OutcomeRequest(recommendation_id=first.recommendation.id, success=False))
        assert out.next is not None
        svc.diagnoses.trace_store.stored_run = lambda tenant, trace_id: None  # type: ignore[method-assign]
        resp = svc.diagnose("acme", _loop().model_copy(update={"id": first.trace_id}), DiagnoseOptions())
        assert resp.recommendation.id == out.next.id != first.recommendation.id
        assert svc.stores.traces.list_traces("acme").items[0].id == first.trace_id  # one run, replaced
        assert len(svc.stores.traces.list_traces("acme").items) == 1
    finally:
        svc.close()

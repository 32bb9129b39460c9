"""The stateful service on both stores (SQLite and PostgreSQL): the dialect-specific paths
(upserts, row locks, stream rows) under a session flow, outcomes and concurrent appends."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from model.builder import make_trace
from model.diagnosis import Diagnoser
from model.options import DiagnoseOptions
from serve.api_models import AppendStepsRequest, ObservationsRequest, OutcomeRequest
from serve.app import build_service
from serve.service import NotFoundError, TriageService
from serve.settings import Settings
from tests.storefix import db_url  # noqa: F401  (fixture)


@pytest.fixture
def service(db_url: str) -> Any:  # noqa: F811
    svc = build_service(Settings(database_url=db_url), Diagnoser())
    yield svc
    svc.store.dispose()


def _call(i: int) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}}
        ],
    }


def test_session_flow_and_outcomes(service: TriageService) -> None:
    first = service.append_steps(
        "t", "s", AppendStepsRequest(messages=[{"role": "user", "content": "find x"}])
    )
    assert first.appended == [0]
    for i in range(3):
        service.append_steps("t", "s", AppendStepsRequest(messages=[_call(i)]))
        r = service.append_steps(
            "t",
            "s",
            AppendStepsRequest(messages=[{"role": "tool", "tool_call_id": f"c{i}", "content": "none"}]),
        )
    assert r.primary is not None and (r.primary.kind, r.primary.step) == ("loop", 6)
    out = service.report_outcome("t", OutcomeRequest(recommendation_id=r.recommendation.id, success=False))
    assert out.escalated and out.next is not None and out.next.strategy == "replan_global"
    again = service.report_outcome("t", OutcomeRequest(recommendation_id=r.recommendation.id, success=False))
    assert not again.escalated
    view = service.get_session("t", "s")
    assert [(f.key, f.rung) for f in view.failures] == [("loop@6", 1)]
    with pytest.raises(NotFoundError):
        service.get_session("other-tenant", "s")


def test_sessionless_diagnose_keeps_state_on_the_trace(service: TriageService) -> None:
    trace = make_trace("timeout", seed=2, n_steps=8)
    trace.steps = trace.steps[:-1]  # the run as the agent has it right after the timeout (not yet handled)
    trace.id = "tt"
    r1 = service.diagnose("t", trace, DiagnoseOptions())
    r2 = service.diagnose("t", trace, DiagnoseOptions())  # the same trace again: the same open failure
    assert r1.recommendation.strategy == "retry" and r2.recommendation.id == r1.recommendation.id
    nxt = service.report_outcome("t", OutcomeRequest(recommendation_id=r1.recommendation.id, success=False))
    assert nxt.next is not None and nxt.next.params["attempt"] == 2
    assert service.diagnose("t", trace, DiagnoseOptions()).recommendation.id == nxt.next.id
    detail = service.get_trace("t", "tt")
    assert [o.success for o in detail.outcomes] == [False]
    assert [x.attempt for x in detail.recommendations] == [1, 2]


def test_concurrent_appends_lose_no_step(service: TriageService) -> None:
    def append(i: int) -> list[int]:
        req = AppendStepsRequest(messages=[{"role": "user", "content": f"m{i}"}])
        return service.append_steps("t", "race", req).appended

    with ThreadPoolExecutor(max_workers=6) as pool:
        got = [i for a in pool.map(append, range(18)) for i in a]
    assert sorted(got) == list(range(18))
    view = service.get_session("t", "race")
    assert view.steps == 18 and view.next_source_index == 18


def test_streams_and_autofeed(service: TriageService) -> None:
    r = service.observe(
        "t", "q", ObservationsRequest(values=[0.0] * 5 + [9.0] * 3, params={"mean": 0.0, "std": 1.0})
    )
    assert [a.index for a in r.alarms] == [5, 6, 7] and r.alarm_open
    trace = make_trace(None, seed=1, n_steps=6)
    resp = service.diagnose("t", trace, DiagnoseOptions())
    # posted without a task type, the stream's alarm applies to every task type of the tenant
    assert [(f.kind, f.details["stream"]) for f in resp.failures] == [("degradation", "q")]
    assert service.diagnose(
        "u", make_trace(None, seed=1, n_steps=6), DiagnoseOptions()
    ).healthy  # other tenant
    service.observe("t", "q", ObservationsRequest(values=[9.1], rebaseline=True))
    assert service.diagnose("t", make_trace(None, seed=2, n_steps=6), DiagnoseOptions()).healthy
    fed = service.store.get_stream("t", "latency_ms", trace.task_type or "default")
    assert fed is not None and fed.n == 2  # every diagnosed trace of tenant t fed its latency


def test_concurrent_failed_outcomes_escalate_once(service: TriageService) -> None:
    trace = make_trace("timeout", seed=5, n_steps=8)
    trace.steps = trace.steps[:-1]  # right after the timeout, before the answer that reports it
    rec = service.diagnose("t", trace, DiagnoseOptions()).recommendation
    req = OutcomeRequest(recommendation_id=rec.id, success=False)
    with ThreadPoolExecutor(max_workers=4) as pool:
        outs = list(pool.map(lambda _: service.report_outcome("t", req), range(4)))
    assert sorted(o.escalated for o in outs) == [False, False, False, True]
    assert sorted(o.recorded for o in outs) == [False, False, False, True]  # repeats acknowledged
    assert len(service.get_trace("t", trace.id).outcomes) == 1  # ... and stored once


@pytest.mark.parametrize(
    ("params", "msg"),
    [
        ({"shift": -1}, "shift must be > 0"),
        ({"nonsense": 1}, "not a setting of the cusum detector"),
        ({"arl0": 1e308}, "can't be computed"),
        ({"shift": 1e300, "arl0": 10}, "can't be computed"),
    ],
)
def test_bad_stream_settings_are_input_errors(tmp_path: Any, params: dict[str, Any], msg: str) -> None:
    from model.errors import InputError

    svc = build_service(Settings(data_dir=tmp_path), Diagnoser())
    with pytest.raises(InputError, match=msg) as exc:
        svc.observe("t", "q", ObservationsRequest(values=[1.0], params=params))
    assert exc.value.path == "params"


def test_session_started_by_a_whole_trace_continues_its_indices(service: TriageService) -> None:
    trace = make_trace(None, seed=3, n_steps=6)
    trace.session_id = "mixed"
    service.diagnose("t", trace, DiagnoseOptions())
    last = max(s.source_index for s in trace.steps)
    r = service.append_steps(
        "t", "mixed", AppendStepsRequest(messages=[{"role": "user", "content": "and then?"}])
    )
    assert r.appended == [len(trace.steps)]
    stored = service.stored_trace("t", trace.id)
    assert stored.steps[-1].source_index == last + 1


def test_human_labels(service: TriageService) -> None:
    from model.errors import InputError
    from serve.api_models import LabelRequest

    trace = make_trace("hallucination", seed=1, n_steps=8)
    service.diagnose("t", trace, DiagnoseOptions())
    r = service.add_label("t", trace.id, LabelRequest(kind="hallucination", step=len(trace.steps) - 1))
    assert r.labels == 1 and r.model_version
    assert service.add_label("t", trace.id, LabelRequest(kind="healthy")).labels == 2
    with pytest.raises(NotFoundError):
        service.add_label("other", trace.id, LabelRequest(kind="healthy"))
    with pytest.raises(InputError) as exc:
        service.add_label("t", trace.id, LabelRequest(kind="loop", step=len(trace.steps)))
    assert exc.value.path == "step"
    history = list(service.store.iter_history("t"))
    assert [(h["kind"], h["source_index"]) for h in history[0]["labels"]] == [
        ("hallucination", trace.steps[-1].source_index),
        (None, None),
    ]

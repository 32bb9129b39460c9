"""The stateful service on both stores (SQLite and PostgreSQL): the dialect-specific paths
(upserts, row locks, stream rows) under a session flow, outcomes and concurrent appends."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from model.core.errors import NotFoundError
from model.core.options import DiagnoseOptions
from model.core.schema import Step, StepKind, Trace
from model.data.builder import make_trace
from model.diagnosis.diagnoser import Diagnoser
from serve.schemas import AppendStepsRequest, ObservationsRequest, OutcomeRequest
from serve.services.triage import TriageService
from serve.settings import Settings
from serve.wiring import build_service
from tests.storefix import db_url  # noqa: F401  (fixture)


@pytest.fixture
def service(db_url: str) -> Any:  # noqa: F811
    svc = build_service(Settings(database_url=db_url), Diagnoser())
    yield svc
    svc.stores.db.dispose()


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
    view = service.sessions.get_session("t", "s")
    assert [(f.key, f.rung) for f in view.failures] == [("loop@6", 1)]
    with pytest.raises(NotFoundError):
        service.sessions.get_session("other-tenant", "s")


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
    view = service.sessions.get_session("t", "race")
    assert view.steps == 18 and view.next_source_index == 18


def test_streams_and_autofeed(service: TriageService) -> None:
    r = service.observe(
        "t", "q", ObservationsRequest(values=[0.0] * 5 + [9.0] * 3, params={"mean": 0.0, "std": 1.0})
    )
    assert [a.index for a in r.alarms] == [5] and r.alarm_open  # one alarm for the one change
    assert (r.alarms[0].mean, r.alarms[0].std, r.alarms[0].bound) == (0.0, 1.0, 1.0)
    trace = make_trace(None, seed=1, n_steps=6)
    resp = service.diagnose("t", trace, DiagnoseOptions())
    # posted without a task type, the stream's alarm is a signal on every task type of the tenant;
    # no trace measures "q", so none is unhealthy for it
    assert resp.healthy
    assert [(f.kind, f.details["stream"], f.details["beyond"]) for f in resp.signals] == [
        ("degradation", "q", False)
    ]
    other = service.diagnose("u", make_trace(None, seed=1, n_steps=6), DiagnoseOptions())
    assert other.healthy and not other.signals  # other tenant
    service.observe("t", "q", ObservationsRequest(values=[9.1], rebaseline=True))
    second = service.diagnose("t", make_trace(None, seed=2, n_steps=6), DiagnoseOptions())
    assert not second.signals
    # both runs name no agent: one agent inferred for the generator's runs (issue 31), its stream fed by both
    assert resp.agent_source == second.agent_source == "inferred" and second.agent == resp.agent
    # the second run's values wait in the feed (TRIAGE_STREAM_FEED_S); a reader of the stream applies them first
    assert service.changepoints("t", "latency_ms", resp.agent, None).n == 2  # every diagnosed trace fed its latency
    fed = service.stores.streams.get_stream("t", "latency_ms", resp.agent)  # type: ignore[arg-type]
    assert fed is not None and fed.n == 2


def _answer_trace(task_type: str | None, chars: int, trace_id: str) -> Trace:
    words = ("The refund for order 4411 was issued to the original card today. " * 40)[:chars]
    return Trace(
        id=trace_id,
        task_type=task_type,
        steps=[
            Step(kind=StepKind.USER_INPUT, content="Where is my refund for order 4411?"),
            Step(kind=StepKind.FINAL_OUTPUT, content=words),
        ],
    )


def test_a_posted_stream_of_170_values_makes_no_task_type_unhealthy(service: TriageService) -> None:
    # Issue 11: 170 values POSTed to any stream name, without a task type, turned every trace of
    # the tenant unhealthy. Now the alarm is a signal, and a failure only of a trace whose own
    # value is beyond the stream's bound.
    rng = np.random.default_rng(0)
    values = np.r_[rng.normal(0.0, 1.0, 150), rng.normal(4.0, 1.0, 20)].tolist()
    r = service.observe("t", "anything", ObservationsRequest(values=values))
    assert [(a.index, a.direction, a.start) for a in r.alarms] == [(151, "up", 149)] and r.alarm_open
    for i, task in enumerate([None, "chat", "code", "multi_agent"]):
        resp = service.diagnose("t", _answer_trace(task, 60, f"tt{i}"), DiagnoseOptions())
        assert resp.healthy, resp.failures
        assert [(f.kind, f.details["stream"]) for f in resp.signals] == [("degradation", "anything")]
        assert resp.signals[0].confidence < 0.5


def test_a_traces_own_value_beyond_the_bound_makes_it_a_failure(service: TriageService) -> None:
    # A stream the traces measure themselves: the final answer's length, for task type "faq".
    rng = np.random.default_rng(5)
    values = np.r_[rng.normal(60.0, 5.0, 120), rng.normal(90.0, 5.0, 10)].tolist()
    r = service.observe("t", "output_chars", ObservationsRequest(values=values, task_type="faq"))
    assert [(a.index, a.direction, a.start) for a in r.alarms] == [(120, "up", 117)]
    alarm = r.alarms[0]
    assert alarm.bound == pytest.approx(alarm.mean + alarm.std)  # shift 1σ
    assert alarm.mean == pytest.approx(float(np.mean(values[:120])))
    by_task = DiagnoseOptions(agent_from_task_type=True)  # the task type names the agent (asked: issue 31)
    long = service.diagnose("t", _answer_trace("faq", 120, "long"), by_task)
    short = service.diagnose("t", _answer_trace("faq", 60, "short"), by_task)
    elsewhere = service.diagnose("t", _answer_trace("chat", 120, "elsewhere"), by_task)
    assert [(f.kind, f.details["value"], f.details["beyond"]) for f in long.failures] == [
        ("degradation", 120.0, True)
    ]
    assert not long.healthy and long.primary is not None and long.primary.kind == "degradation"
    assert "this trace's 120 is beyond its bound" in long.failures[0].evidence
    assert short.healthy and [(f.details["value"], f.details["beyond"]) for f in short.signals] == [
        (60.0, False)
    ]
    assert elsewhere.healthy and not elsewhere.signals  # another task type: another stream
    # The stream comes back to its mean: S+ (held at 3h ≈ 15.2) loses k = 0.5 a point, is 0 after
    # 31, and the episode closes without a re-baseline.
    back = service.observe(
        "t", "output_chars", ObservationsRequest(values=[alarm.mean] * 40, task_type="faq")
    )
    assert back.alarms == [] and back.alarm_open is False
    assert not service.diagnose("t", _answer_trace("faq", 120, "later"), by_task).failures


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
    from model.core.errors import InputError

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
    from model.core.errors import InputError
    from serve.schemas import LabelRequest

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
    history = list(service.stores.labels.iter_history("t"))
    assert [(h["kind"], h["source_index"]) for h in history[0]["labels"]] == [
        ("hallucination", trace.steps[-1].source_index),
        (None, None),
    ]

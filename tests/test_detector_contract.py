"""One contract test over every registered trace detector (STYLE.md: parametrised over the registry)."""

from __future__ import annotations

import inspect as pyinspect
from typing import Any

import pytest

from model.core.findings import Finding
from model.core.kinds import FailureKind
from model.core.schema import Trace
from model.data.builder import RECIPE_KINDS, TRAP_NAMES, make_trace, make_trap
from model.detectors import TRACE_DETECTORS, TraceDetector

NAMES = sorted(TRACE_DETECTORS)


def _traces() -> list[Trace]:
    out = [make_trace(k, seed=s, n_steps=12) for k in [None, *RECIPE_KINDS] for s in (0, 1)]
    out += [make_trap(n, seed=0) for n in TRAP_NAMES]
    out.append(make_trace(FailureKind.REFUSAL, seed=0, language="zh"))
    for t in out[::3]:  # some traces carry span ids, as span imports do
        for i, s in enumerate(t.steps):
            s.span_id = f"{i:016x}"
    return out


TRACES = _traces()


def _check_findings(det: Any, trace: Trace, found: object) -> None:
    assert isinstance(found, list)
    for f in found:
        assert isinstance(f, Finding)
        Finding.model_validate(f.model_dump())  # still valid after any post-construction edits
        assert f.detector == det.name
        assert f.kind in det.kinds
        assert 0.0 <= f.confidence <= 1.0
        assert f.evidence.strip()
        if f.step is not None:
            assert 0 <= f.step < len(trace.steps)
            s = trace.steps[f.step]
            assert f.source_index == s.source_index
            assert f.span_id == s.span_id


@pytest.fixture(params=NAMES)
def cls(request: pytest.FixtureRequest) -> type[Any]:
    return TRACE_DETECTORS[request.param]


def _usable(det: Any) -> Any:
    """Skip a detector whose artefact is not built in this checkout (the classifier before training)."""
    available = getattr(det, "available", None)
    if callable(available) and not available():
        pytest.skip(f"{det.name}: artefact not built here")
    return det


def test_registry_is_not_empty() -> None:
    assert len(NAMES) >= 12


def test_identity(cls: type[Any]) -> None:
    assert TRACE_DETECTORS[cls.name] is cls
    assert isinstance(cls.version, str) and cls.version
    assert isinstance(cls.kinds, tuple) and cls.kinds
    assert all(isinstance(k, FailureKind) for k in cls.kinds)
    assert isinstance(cls(), TraceDetector)


def test_constructor_takes_keyword_only_params_with_immutable_defaults(cls: type[Any]) -> None:
    params = [p for p in pyinspect.signature(cls.__init__).parameters.values() if p.name != "self"]
    for p in params:
        assert p.kind is pyinspect.Parameter.KEYWORD_ONLY, p.name
        assert p.default is not pyinspect.Parameter.empty, p.name
        assert not isinstance(p.default, list | dict | set | bytearray), p.name
    a, b = cls(), cls()
    for key, value in a.get_params().items():  # no state shared between instances
        if isinstance(value, list | dict | set):
            assert value is not b.get_params()[key]
    assert set(a.get_params()) == {p.name for p in params}


def test_get_params_round_trip(cls: type[Any]) -> None:
    det = cls()
    params = det.get_params()
    assert cls(**params).get_params() == params
    for name, value in params.items():  # parameters are stored as given
        assert getattr(det, name) is value or getattr(det, name) == value


def test_inspect_an_empty_trace(cls: type[Any]) -> None:
    det = _usable(cls())
    found = det.inspect(Trace())
    _check_findings(det, Trace(), found)


def test_inspect_is_valid_pure_and_deterministic(cls: type[Any]) -> None:
    det = _usable(cls())
    for trace in TRACES:
        before = trace.model_dump()
        found = det.inspect(trace)
        _check_findings(det, trace, found)
        assert trace.model_dump() == before  # inspect does not touch the trace
        assert [f.model_dump() for f in det.inspect(trace)] == [f.model_dump() for f in found]


def test_healthy_traces_give_valid_findings_and_no_rule_failures(cls: type[Any]) -> None:
    det = _usable(cls())
    is_rule = cls.__module__ == "model.detectors.rules"
    for trace in [make_trace(None, seed=s, n_steps=16) for s in range(4)]:
        found = det.inspect(trace)
        _check_findings(det, trace, found)
        if is_rule:  # a learned model may err; a rule on the builder's healthy traces must not
            assert [f for f in found if f.confidence >= 0.5] == []


def test_inspect_with_non_default_params_where_there_are_some() -> None:
    samples: dict[str, dict[str, Any]] = {"disallowed_tool": {"allowed_tools": ["search"]}, "loop": {"repeats": 2, "cycle": 5}}
    for name, params in samples.items():
        cls = TRACE_DETECTORS[name]
        det = cls(**params)
        assert det.get_params() == params
        assert cls(**det.get_params()).get_params() == params
        for trace in TRACES:
            _check_findings(det, trace, det.inspect(trace))

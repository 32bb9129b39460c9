"""One contract test over every detector in the catalogs (STYLE.md: parametrised over the registry):
the trace detectors of :mod:`model.detectors.catalog`, the stream detectors of :mod:`model.streams.catalog`."""

from __future__ import annotations

import doctest
import inspect as pyinspect
import json
from typing import Any

import pytest

import model.core.json_schema as json_schema
import model.detectors.base as detectors_base
import model.detectors.catalog as detectors_catalog
import model.detectors.rules.answer
import model.detectors.rules.assumption
import model.detectors.rules.calls
import model.detectors.rules.common
import model.detectors.rules.failed
import model.detectors.rules.loop
import model.detectors.rules.refusal
import model.streams.catalog as streams_catalog
from model.core.errors import UnknownDetectorError
from model.core.findings import Finding
from model.core.kinds import FailureKind
from model.core.schema import Trace
from model.data.builder import RECIPE_KINDS, TRAP_NAMES, make_trace, make_trap
from model.detectors.base import StreamDetector, TraceDetector
from model.detectors.catalog import (
    OPT_IN_DETECTORS,
    TRACE_DETECTORS,
    default_detector_names,
    default_detectors,
    make_detector,
    trace_detector_names,
)
from model.streams.catalog import STREAM_DETECTORS, make_stream_detector, stream_detector_names

RULE_MODULES = [
    model.detectors.rules.answer,
    model.detectors.rules.assumption,
    model.detectors.rules.calls,
    model.detectors.rules.common,
    model.detectors.rules.failed,
    model.detectors.rules.loop,
    model.detectors.rules.refusal,
]

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
    is_rule = cls.__module__.startswith("model.detectors.rules.")
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


@pytest.mark.parametrize("make, catalog, shape", [(make_detector, TRACE_DETECTORS, "trace"),
                                                   (make_stream_detector, STREAM_DETECTORS, "stream")])
def test_an_unknown_name_is_an_error_that_lists_the_valid_ones(make: Any, catalog: dict[str, Any], shape: str) -> None:
    with pytest.raises(UnknownDetectorError) as e:
        make("no_such_detector")
    assert f"unknown {shape} detector 'no_such_detector'; valid names: {', '.join(sorted(catalog))}" in str(e.value)


def test_the_catalogs_name_each_class_by_its_name() -> None:
    assert trace_detector_names() == sorted(TRACE_DETECTORS) == NAMES
    assert stream_detector_names() == sorted(STREAM_DETECTORS)
    for catalog in (TRACE_DETECTORS, STREAM_DETECTORS):
        assert all(cls.name == name for name, cls in catalog.items())


# ------------------------------------------------------------------ stream detectors (update(x) -> Alarm | None)

STREAM = [10.0 + (i % 5) * 0.3 for i in range(150)] + [14.0 + (i % 3) * 0.2 for i in range(60)]


@pytest.fixture(params=sorted(STREAM_DETECTORS))
def stream_cls(request: pytest.FixtureRequest) -> type[Any]:
    return STREAM_DETECTORS[request.param]


def test_stream_identity(stream_cls: type[Any]) -> None:
    assert STREAM_DETECTORS[stream_cls.name] is stream_cls
    assert isinstance(stream_cls.version, str) and stream_cls.version
    assert isinstance(stream_cls(), StreamDetector)


def test_stream_constructor_takes_keyword_only_params_with_immutable_defaults(stream_cls: type[Any]) -> None:
    params = [p for p in pyinspect.signature(stream_cls.__init__).parameters.values() if p.name != "self"]
    for p in params:
        assert p.kind is pyinspect.Parameter.KEYWORD_ONLY, p.name
        assert p.default is not pyinspect.Parameter.empty, p.name
        assert not isinstance(p.default, list | dict | set | bytearray), p.name
    det = stream_cls()
    assert set(det.get_params()) == {p.name for p in params}
    assert stream_cls(**det.get_params()).get_params() == det.get_params()


def test_stream_reset_is_idempotent(stream_cls: type[Any]) -> None:
    det = stream_cls()
    fresh = det.get_state()
    alarms = [a for x in STREAM if (a := det.update(x)) is not None]
    assert alarms, "the stream's shift raises an alarm"
    det.reset()
    assert det.get_state() == fresh
    det.reset()
    assert det.get_state() == fresh
    assert [a for x in STREAM if (a := det.update(x)) is not None] == alarms


def test_stream_state_round_trips_through_json(stream_cls: type[Any]) -> None:
    det = stream_cls()
    half = len(STREAM) // 2 + 20
    for x in STREAM[:half]:
        det.update(x)
    other = stream_cls(**det.get_params())
    other.set_state(json.loads(json.dumps(det.get_state())))
    assert other.get_state() == det.get_state()
    rest = STREAM[half:]
    assert [other.update(x) for x in rest] == [det.update(x) for x in rest]
    assert other.get_state() == det.get_state()


@pytest.mark.parametrize("module", [detectors_base, detectors_catalog, streams_catalog, json_schema,
                                    *RULE_MODULES])
def test_docstring_examples(module: object) -> None:
    result = doctest.testmod(module)  # type: ignore[arg-type]
    assert result.failed == 0


def test_the_default_set_is_every_trace_detector_but_the_opt_in_ones() -> None:
    from model.diagnosis.diagnoser import Diagnoser

    names = default_detector_names()
    assert sorted(Diagnoser().detectors) == names  # the diagnoser's default set is the catalog's
    assert names == sorted(set(TRACE_DETECTORS) - OPT_IN_DETECTORS) and "classifier" not in names
    built, again = default_detectors(), default_detectors()
    assert [d.name for d in built] == names
    assert all(a is not b for a, b in zip(built, again, strict=True))  # fresh instances, no shared state

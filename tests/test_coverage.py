"""Coverage and the unknown verdict: content capture off, redaction placeholders (model and CLI)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from model.core.coverage import assess, is_placeholder, verdict
from model.core.schema import Step, Trace
from model.diagnosis.diagnoser import Diagnoser
from model.importers import load_trace, load_traces
from tests.conftest import ROOT
from tests.spanfix import chat, otlp, span


def _content_off_run() -> dict[str, object]:
    """Three chat calls of one session, one trace each, content capture off (the OTel default)."""
    reasons = [["tool_calls"], ["tool_calls"], ["stop"]]
    return otlp([chat(f"{i:032x}", f"{i:016x}", 100 + i, session="conv-1",
                      **{"gen_ai.response.finish_reasons": reasons[i]}) for i in range(3)])


def test_content_off_is_unknown_not_healthy() -> None:
    trace = load_trace(_content_off_run())
    resp = Diagnoser().diagnose(trace)
    assert resp.healthy is None and resp.failures == []
    assert resp.recommendation.strategy == "continue"
    assert (resp.coverage.steps, resp.coverage.without_content, resp.coverage.redacted) == (3, 3, 0)
    assert resp.coverage.unreadable_agent_steps == [0, 1, 2]
    assert any("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true" in w for w in resp.warnings)
    assert any("no user input" in w for w in resp.warnings)


def test_content_off_tool_results_are_unknown_and_a_failure_still_wins() -> None:
    tid = "a" * 32
    spans = [
        chat(tid, "01" * 8, 100, **{"gen_ai.response.finish_reasons": ["tool_calls"]}),
        span(tid, "02" * 8, "execute_tool search", 101,
             {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search", "gen_ai.tool.call.id": "c1"}),
        chat(tid, "03" * 8, 102, **{"gen_ai.response.finish_reasons": ["stop"]}),
    ]
    trace = load_trace(otlp(spans))
    assert [s.metadata.get("content_recorded") for s in trace.steps] == [False, None, False, False]
    cov, _ = assess(trace)
    assert (cov.without_content, cov.unreadable_agent_steps) == (3, [0, 2, 3])
    # the same run with the tool failing: a failure is found, so the verdict is known
    spans[1] = span(tid, "02" * 8, "execute_tool search", 101,
                    {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
                     "gen_ai.tool.call.id": "c1", "error.type": "503"}, error="503 Service Unavailable")
    resp = Diagnoser().diagnose(load_trace(otlp(spans)))
    assert resp.healthy is False
    assert ("tool_error", 1) in {(f.kind.value, f.source_index) for f in resp.failures}
    assert resp.coverage.without_content == 2  # the failed result carries its error text


def test_openinference_redacted_placeholders() -> None:
    tid = "b" * 32
    llm = {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini",
           "llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": "__REDACTED__",
           "llm.output_messages.0.message.role": "assistant",
           "llm.output_messages.0.message.content": "__REDACTED__"}
    trace = load_trace(otlp([span(tid, "01" * 8, "ChatOpenAI", 100, llm)]))
    resp = Diagnoser().diagnose(trace)
    assert resp.healthy is None and resp.recommendation.strategy == "continue"
    assert (resp.coverage.steps, resp.coverage.without_content, resp.coverage.redacted) == (2, 0, 2)
    assert any("OPENINFERENCE_HIDE_INPUTS=false" in w for w in resp.warnings)


def test_recorded_content_stays_healthy_and_partial_masking_is_content() -> None:
    t = Trace(steps=[Step(kind="user_input", content="mail me at [REDACTED:email]"),
                     Step(kind="final_output", content="Done.", source_index=1)])
    resp = Diagnoser().diagnose(t)
    assert resp.healthy is True and resp.warnings == []
    assert (resp.coverage.steps, resp.coverage.without_content, resp.coverage.redacted) == (2, 0, 0)
    assert is_placeholder("***") and is_placeholder("[redacted]") and not is_placeholder("")


def test_a_redacted_user_turn_alone_keeps_the_verdict() -> None:
    t = Trace(steps=[Step(kind="user_input", content="__REDACTED__"),
                     Step(kind="final_output", content="It is 4.", source_index=1)])
    cov, warnings = assess(t)
    assert cov.redacted == 1 and cov.unreadable_agent_steps == [] and verdict(cov, failures=0) is True
    assert warnings and "placeholder" in warnings[0]


def test_cli_content_off_exit_0_unknown(tmp_path: Path) -> None:
    f = tmp_path / "run.json"
    f.write_text(json.dumps(_content_off_run()))
    r = subprocess.run([sys.executable, "-m", "serve.cli.main", "diagnose", str(f)], cwd=ROOT,
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode()
    assert "unknown" in out and "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in out
    r = subprocess.run([sys.executable, "-m", "serve.cli.main", "diagnose", str(f), "--json"], cwd=ROOT,
                       capture_output=True, timeout=120)
    assert r.returncode == 0 and json.loads(r.stdout)["healthy"] is None
    assert len(load_traces(_content_off_run())) == 1

"""Traces recorded from the real instrumentation libraries (``make integrations``; committed under
tests/fixtures/integrations/) import right, the ignored 503 and the 4× loop are caught at the
right ``source_index``, and content capture off gives ``healthy: null``. The table in
docs/integrations.md is built here from the fixtures (``TRIAGE_WRITE_DOCS=1`` rewrites it)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from model.core.findings import DiagnosisResponse
from model.core.schema import StepKind, Trace
from model.diagnosis.diagnoser import Diagnoser
from model.importers import load_traces
from tests.conftest import FIXTURES, ROOT

DIR = FIXTURES / "integrations"
DOC = ROOT / "docs" / "integrations.md"
QUESTION = "What's the weather in Lisbon tomorrow?"
ANSWER = "Tomorrow in Lisbon it will be sunny with a high of 24°C."


def _records() -> list[dict[str, Any]]:
    return [json.loads(p.read_text(encoding="utf-8")) | {"file": p.name} for p in sorted(DIR.glob("*.json"))]


RECORDS = _records()
#: libraries whose spans carry the offered tools (gen_ai.tool.definitions, llm.tools.*)
OFFERS_TOOLS = {"openinference-openai", "openinference-langchain", "openllmetry-openai", "langfuse-openai"}
ON = [r for r in RECORDS if r["content"]]
OFF = [r for r in RECORDS if not r["content"]]


def _one(record: dict[str, Any]) -> tuple[Trace, DiagnosisResponse]:
    session = (record.get("options") or {}).get("session")  # one trace per call: the session option
    traces = load_traces(record["trace"], session=session)
    assert len(traces) == 1, f"{record['file']}: {len(traces)} runs"
    return traces[0], Diagnoser().diagnose(traces[0])


def _expected(trace: Trace) -> dict[str, int]:
    """Where the failures are, read off the imported steps: the loop on the third identical
    search's result, the tool error on the 503 result, the ignored error on the final answer."""
    results = [s for s in trace.steps if s.kind is StepKind.TOOL_RESULT]
    searches = [s for s in results if s.tool_name == "search"]
    weather = [s for s in results if s.tool_name == "get_weather"]
    final = [s for s in trace.steps if s.kind is StepKind.FINAL_OUTPUT]
    assert len(searches) == 4 and len(weather) == 1 and len(final) == 1
    return {"loop": searches[2].source_index, "tool_error": weather[0].source_index,
            "ignored_error": final[0].source_index}


def _imports_right(trace: Trace) -> bool:
    users = [s.content for s in trace.steps if s.kind is StepKind.USER_INPUT]
    calls = {s.call_id: s.tool_name for s in trace.steps if s.kind is StepKind.TOOL_CALL}
    results = [s for s in trace.steps if s.kind is StepKind.TOOL_RESULT]
    final = [s.content for s in trace.steps if s.kind is StepKind.FINAL_OUTPUT]
    return (users == [QUESTION] and final == [ANSWER] and len(calls) == 5
            and sorted(calls.values()) == ["get_weather"] + ["search"] * 4
            and all(r.call_id in calls and calls[r.call_id] == r.tool_name for r in results)
            and len(results) == 5)


@pytest.mark.parametrize("record", ON, ids=[r["file"] for r in ON])
def test_content_on_imports_right_and_catches_both(record: dict[str, Any]) -> None:
    trace, resp = _one(record)
    assert _imports_right(trace), [(s.kind.value, s.tool_name, s.content[:40]) for s in trace.steps]
    found = {(f.kind.value, f.source_index) for f in resp.failures}
    want = _expected(trace)
    assert {(k, v) for k, v in want.items()} <= found, (want, found)
    assert resp.healthy is False and resp.coverage.without_content == 0 and resp.coverage.redacted == 0
    if record["library"] in OFFERS_TOOLS:  # the tool schemas the spans carry become Trace.tools
        assert {t.name for t in trace.tools} == {"search", "get_weather"}
        assert all(t.parameters and t.parameters.get("type") == "object" for t in trace.tools)


@pytest.mark.parametrize("record", OFF, ids=[r["file"] for r in OFF])
def test_content_off_is_unknown(record: dict[str, Any]) -> None:
    _, resp = _one(record)
    assert resp.healthy is None and resp.recommendation.strategy == "continue"
    assert resp.warnings and resp.coverage.without_content + resp.coverage.redacted > 0


def test_every_span_library_has_both_recordings() -> None:
    spans = {r["library"] for r in RECORDS if r.get("format", "spans") != "messages"}
    assert spans and {r["library"] for r in OFF} == spans
    assert {r["library"] for r in ON} == {r["library"] for r in RECORDS}


NOT_YET = [
    ("OTel GenAI event mode", "content as log events (`/otlp/v1/logs`): no logs receiver yet"),
]


def _table() -> str:
    rows = []
    for lib in sorted({r["library"] for r in RECORDS}):
        on = next(r for r in ON if r["library"] == lib)
        off = next((r for r in OFF if r["library"] == lib), None)
        trace, resp = _one(on)
        found = {(f.kind.value, f.source_index) for f in resp.failures}
        want = _expected(trace)
        mark = {k: (f"✓ {v}" if (k, v) in found else f"✗ (expected {v})") for k, v in want.items()}
        if off is None:
            off_cell = "— (a message log: no content switch)"
        else:
            off_resp = _one(off)[1]
            verdict = "null" if off_resp.healthy is None else str(off_resp.healthy).lower()
            off_cell = (f"{verdict} ({off_resp.coverage.without_content} without content, "
                        f"{off_resp.coverage.redacted} redacted)")
        what = on.get("format", "spans")
        if on.get("options", {}).get("session"):
            what += ", a trace per call (`options.session`)"
        rows.append(f"| {lib} | `{on['package']}` {on['version']} | {what} | {'✓' if _imports_right(trace) else '✗'} "
                    f"| {len(trace.steps)} | {mark['loop']} | {mark['tool_error']} / {mark['ignored_error']} "
                    f"| {off_cell} |")
    not_yet = "\n".join(f"| {name} | {what} |" for name, what in NOT_YET)
    return f"""# Integrations: what real instrumentation emits

Carrying out what triage recommends (the repair executor and the agent loop it wraps, every
strategy): [executor.md](executor.md).

Every row is a trace recorded from the real library (`make integrations`: one venv per library
under `.integrations/`, the agent of `tests/integrations/agent.py` against the local
OpenAI-compatible stub model `tests/integrations/stub_openai.py`, content capture on and off),
committed under `tests/fixtures/integrations/` and checked by `tests/test_integrations.py`, which
also writes this table (`TRIAGE_WRITE_DOCS=1 .venv/bin/pytest tests/test_integrations.py`).

The agent asks for tomorrow's weather in Lisbon; the model calls `search` four times with the
same query (nothing found: a loop, caught on the third repeat's result), then `get_weather`,
which answers HTTP 503, and then makes up a forecast (the error ignored). The run is traced under
one parent span (the README's recipe); message logs are the run's messages as the library hands
them out (`messages_to_dict`, `to_input_list()`). Columns: the library and version; whether the import is
right (the user turn, five calls each linked to its result by call id, the final answer); steps
imported; the `source_index` of the loop and of the 503 / the ignored error (✓ found there);
and the verdict with content capture off.

| library | package, version | what it emits | imports right | steps | loop @ source_index | 503 / ignored @ source_index | content off → healthy |
| --- | --- | --- | --- | --- | --- | --- | --- |
{chr(10).join(rows)}

## Not recorded yet

These formats from issue 13 have no recorded fixture and no importer support yet:

| library | what it emits |
| --- | --- |
{not_yet}
"""


#: Below this line docs/integrations.md is written by hand (the rewrite keeps it).
HAND_WRITTEN = "<!-- written by hand below: TRIAGE_WRITE_DOCS keeps it -->"


def test_docs_table_matches_the_fixtures() -> None:
    text = _table()
    current = DOC.read_text(encoding="utf-8")
    if HAND_WRITTEN in current:
        text += "\n" + HAND_WRITTEN + current.split(HAND_WRITTEN, 1)[1]
    if os.environ.get("TRIAGE_WRITE_DOCS"):
        DOC.write_text(text, encoding="utf-8")
    assert DOC.read_text(encoding="utf-8") == text, "docs/integrations.md is stale: TRIAGE_WRITE_DOCS=1 rewrites it"


def test_fixture_folder_is_what_make_integrations_writes() -> None:
    assert all(Path(r["file"]).stem.removesuffix("-content-off") == r["library"] for r in RECORDS)

"""The frozen semantic cases: hand-written runs of the kinds the classifier exists for, scored.

``datasets/semantic/cases.jsonl`` holds hand-written OpenAI-format runs, written before any training
on them and never trained on (see ``datasets/semantic/README.md``): failing runs of four groups —
``off_topic`` (an answer to another question), ``goal_drift`` (kind ``off_topic`` with
``details.subtype = "goal_drift"``: the agent gradually moves to another task), ``hallucination``
(a figure or name no tool result or input backs) and ``context_loss`` (a constraint of the goal
that a later call or the answer drops) — in English and Chinese, each with the message index where
it goes wrong, and healthy look-alikes of the same shape (the answer grounded, on topic, the
constraint kept; some hard: a computed figure, a paraphrased constraint, a polite closing, an honest
"nothing found").

:func:`load_cases` reads and validates the file; :func:`evaluate_cases` runs any
``diagnose_fn(trace_dict) -> DiagnosisResponse`` over them and counts, per group and language:

- **caught**: the run is flagged (``healthy`` is false);
- **at index**: flagged, and a failure's ``source_index`` — or the response's
  ``attribution.source_index``, when it has one — equals the case's ``expected_source_index``;
- **right kind there**: a failure of the case's kind at that ``source_index``;
- for look-alikes, **false alarms**: the look-alike is flagged;

each as ``k/n`` with a Wilson 95 % interval; the AUROC of the run score (the response's
``failure_probability`` when it has one, else its highest failure or signal confidence) between
failing runs and look-alikes; and the same for the highest confidence of the case's own kind. :func:`render_markdown` prints the tables.

Command line (the service's path: rules, plus the shipped classifier and run scorer when their
artefacts exist)::

    python -m model.training.semantic --cases datasets/semantic/cases.jsonl [--no-classifier] [--no-runscore] [--json OUT]

>>> wilson(0, 10)[1] > 0.2 and wilson(10, 10)[0] < 0.8
True
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from model.core.errors import InputError
from model.core.findings import DiagnosisResponse
from model.core.kinds import FailureKind
from model.core.metrics import auroc
from model.core.paths import REPO_ROOT

GROUPS: tuple[str, ...] = ("off_topic", "goal_drift", "hallucination", "context_loss")
"""The failing groups, in report order (``goal_drift`` is ``off_topic`` with that subtype)."""
LANGUAGES: tuple[str, ...] = ("en", "zh")
CASE_KINDS: dict[str, FailureKind] = {
    k.value: k for k in (FailureKind.OFF_TOPIC, FailureKind.HALLUCINATION, FailureKind.CONTEXT_LOSS)
}
SUBTYPES: dict[str, FailureKind] = {"goal_drift": FailureKind.OFF_TOPIC}
MIN_MESSAGES, MAX_MESSAGES = 3, 15
DEFAULT_CASES = REPO_ROOT / "datasets" / "semantic" / "cases.jsonl"
_FIELDS = ("id", "language", "kind", "details", "expected_source_index", "lookalike_of", "note", "trace")
_Z95 = 1.959963984540054

DiagnoseFn = Callable[[dict[str, Any]], DiagnosisResponse]


@dataclass(frozen=True)
class SemanticCase:
    """One frozen case: a failing run (``kind`` set) or a healthy look-alike (``lookalike_of`` set)."""

    id: str
    language: str
    kind: FailureKind | None
    subtype: str | None
    expected_source_index: int | None
    lookalike_of: str | None
    note: str
    trace: dict[str, Any] = field(repr=False)
    line: int = 0

    @property
    def failing(self) -> bool:
        return self.kind is not None

    @property
    def group(self) -> str | None:
        """``goal_drift`` for that subtype, else the kind's value; ``None`` for a look-alike."""
        if self.kind is None:
            return None
        return self.subtype or self.kind.value


# --------------------------------------------------------------------------------------------
# loading


def _fail(message: str, *, line: int, path: str | None, file: str) -> InputError:
    return InputError(f"{message} (in {file})", path=path, line=line)


def _parse_line(raw: Any, *, line: int, file: str) -> SemanticCase:
    def bad(message: str, path: str | None = None) -> InputError:
        return _fail(message, line=line, path=path, file=file)

    if not isinstance(raw, dict):
        raise bad(f"expected a JSON object, got {type(raw).__name__}")
    missing = [f for f in _FIELDS if f not in raw and f != "details"]
    if missing:
        raise bad(f"missing field(s): {', '.join(missing)}")
    extra = sorted(set(raw) - set(_FIELDS))
    if extra:
        raise bad(f"unknown field(s): {', '.join(extra)}; allowed: {', '.join(_FIELDS)}")
    cid = raw["id"]
    if not isinstance(cid, str) or not cid.strip():
        raise bad("must be a non-empty string", "id")
    if raw["language"] not in LANGUAGES:
        raise bad(f"must be one of {', '.join(LANGUAGES)}; got {raw['language']!r}", "language")
    if not isinstance(raw["note"], str):
        raise bad("must be a string", "note")
    details = raw.get("details") or {}
    if not isinstance(details, dict):
        raise bad("must be an object", "details")
    subtype = details.get("subtype")
    trace = raw["trace"]
    if not isinstance(trace, dict) or not isinstance(trace.get("messages"), list):
        raise bad("must be an object with a 'messages' list", "trace")
    messages: list[Any] = trace["messages"]
    if not MIN_MESSAGES <= len(messages) <= MAX_MESSAGES:
        raise bad(f"must hold {MIN_MESSAGES}-{MAX_MESSAGES} messages; got {len(messages)}", "trace.messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise bad("must be an object with a 'role'", f"trace.messages[{i}]")

    kind_raw, idx, of = raw["kind"], raw["expected_source_index"], raw["lookalike_of"]
    kind: FailureKind | None = None
    if kind_raw is None:
        if idx is not None:
            raise bad("must be null for a look-alike (kind null)", "expected_source_index")
        if not isinstance(of, str) or not of:
            raise bad("a look-alike (kind null) must name the id of the case it looks like", "lookalike_of")
        if subtype is not None:
            raise bad("a look-alike has no subtype", "details.subtype")
    else:
        if kind_raw not in CASE_KINDS:
            raise bad(f"must be one of {', '.join(CASE_KINDS)} or null; got {kind_raw!r}", "kind")
        kind = CASE_KINDS[kind_raw]
        if subtype is not None and SUBTYPES.get(subtype) is not kind:
            valid = ", ".join(f"{s} (kind {k.value})" for s, k in SUBTYPES.items())
            raise bad(f"unknown subtype {subtype!r} for kind {kind_raw!r}; valid: {valid}", "details.subtype")
        if of is not None:
            raise bad("must be null for a failing case", "lookalike_of")
        if isinstance(idx, bool) or not isinstance(idx, int) or not 0 <= idx < len(messages):
            raise bad(f"must be a message index in 0..{len(messages) - 1}; got {idx!r}", "expected_source_index")
        if messages[idx]["role"] != "assistant":
            raise bad(f"must point at an assistant message (the agent goes wrong); message {idx} is "
                      f"{messages[idx]['role']!r}", "expected_source_index")
    return SemanticCase(id=cid, language=raw["language"], kind=kind, subtype=subtype,
                        expected_source_index=idx, lookalike_of=of, note=raw["note"],
                        trace=trace, line=line)


def parse_cases(lines: Iterable[str], *, file: str = "<cases>") -> list[SemanticCase]:
    """Cases from JSONL text lines (blank lines skipped); see :func:`load_cases`."""
    cases: list[SemanticCase] = []
    seen: dict[str, int] = {}
    for n, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _fail(f"invalid JSON: {exc.msg} at column {exc.colno}", line=n, path=None, file=file) from exc
        case = _parse_line(raw, line=n, file=file)
        if case.id in seen:
            raise _fail(f"duplicate id {case.id!r} (first on line {seen[case.id]})", line=n, path="id", file=file)
        seen[case.id] = n
        cases.append(case)
    by_id = {c.id: c for c in cases}
    for c in cases:
        if c.lookalike_of is None:
            continue
        target = by_id.get(c.lookalike_of)
        if target is None or not target.failing:
            what = "no case" if target is None else "a look-alike, not a failing case"
            raise _fail(f"{c.lookalike_of!r} is {what}", line=c.line, path="lookalike_of", file=file)
        if target.language != c.language:
            raise _fail(f"language {c.language!r} differs from {target.id!r}'s {target.language!r}",
                        line=c.line, path="language", file=file)
    if not cases:
        raise InputError(f"no cases in {file}")
    return cases


def load_cases(path: str | Path = DEFAULT_CASES) -> list[SemanticCase]:
    """Read and validate a cases file; bad input raises :class:`~model.core.errors.InputError` naming the line.

    Checks: every field present and typed; a failing case's ``expected_source_index`` is one of its
    messages and an assistant's; a look-alike names an existing failing case of its language; ids
    are unique.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read cases file {p}: {exc.strerror or exc}") from exc
    return parse_cases(text.splitlines(), file=str(p))


# --------------------------------------------------------------------------------------------
# scoring


def wilson(k: int, n: int, z: float = _Z95) -> tuple[float, float]:
    """Wilson score interval of ``k`` successes in ``n`` trials (``(0, 1)`` when ``n`` is 0).

    >>> [round(x, 4) for x in wilson(5, 10)]
    [0.2366, 0.7634]
    """
    if n <= 0:
        return (0.0, 1.0)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo = 0.0 if k <= 0 else max(0.0, centre - half)
    hi = 1.0 if k >= n else min(1.0, centre + half)
    return (lo, hi)


def _rate(k: int, n: int) -> dict[str, Any]:
    lo, hi = wilson(k, n)
    return {"k": k, "n": n, "rate": (k / n) if n else None, "ci95": [lo, hi]}


def _attr_source_index(resp: DiagnosisResponse) -> int | None:
    attribution = getattr(resp, "attribution", None)
    if attribution is None:
        return None
    value = attribution.get("source_index") if isinstance(attribution, dict) else getattr(
        attribution, "source_index", None)
    return value if isinstance(value, int) else None


def run_score(resp: DiagnosisResponse) -> float:
    """The run's failure score: ``failure_probability`` when the response has one, else the highest
    failure or signal confidence (0 when there is none)."""
    prob = getattr(resp, "failure_probability", None)
    if isinstance(prob, int | float) and not isinstance(prob, bool):
        return float(prob)
    return max((f.confidence for f in [*resp.failures, *resp.signals]), default=0.0)


def _auroc(pos: Sequence[float], neg: Sequence[float]) -> float | None:
    if not pos or not neg:
        return None
    return auroc(np.array([1] * len(pos) + [0] * len(neg)), np.array([*pos, *neg], dtype=float))


def score_case(case: SemanticCase, resp: DiagnosisResponse, *, kind: FailureKind | None = None) -> dict[str, Any]:
    """One case's record: what the diagnosis said and whether it counts as caught / a false alarm.

    ``kind``: for a look-alike, the kind of the case it mirrors (its ``kind_confidence`` is then the
    highest confidence of that kind); a failing case uses its own.
    """
    flagged = resp.healthy is False
    attr_si = _attr_source_index(resp)
    failures = [{"kind": f.kind.value, "source_index": f.source_index, "confidence": round(f.confidence, 4),
                 "detector": f.detector} for f in resp.failures]
    rec: dict[str, Any] = {
        "id": case.id, "language": case.language, "group": case.group, "lookalike_of": case.lookalike_of,
        "expected_source_index": case.expected_source_index, "healthy": resp.healthy,
        "failures": failures, "attribution_source_index": attr_si,
        "failure_probability": getattr(resp, "failure_probability", None), "score": round(run_score(resp), 4),
    }
    own = case.kind or kind
    rec["kind_confidence"] = round(max((f.confidence for f in [*resp.failures, *resp.signals] if f.kind is own),
                                       default=0.0), 4)
    if case.failing:
        exp = case.expected_source_index
        at_index = flagged and (any(f.source_index == exp for f in resp.failures) or attr_si == exp)
        kind_there = any(f.kind is case.kind and f.source_index == exp for f in resp.failures)
        rec.update(caught=flagged, at_index=at_index, kind_at_index=kind_there)
    else:
        rec["false_alarm"] = flagged
    return rec


def evaluate_cases(cases: Sequence[SemanticCase], diagnose_fn: DiagnoseFn) -> dict[str, Any]:
    """Run ``diagnose_fn`` on every case's trace and count caught runs and false alarms.

    Returns ``{"cases", "failing", "lookalikes", "model_versions", "caught": [rows], "lookalike_rows":
    [rows], "auroc", "per_case": [records]}``. A ``caught`` row is ``{"group", "language", "n",
    "caught", "at_index", "kind_at_index"}`` and a ``lookalike_rows`` row ``{"group", "language",
    "n", "false_alarms"}``, each figure ``{"k", "n", "rate", "ci95": [lo, hi]}`` (Wilson 95 %);
    rows cover each group × language, each group over both languages (``language: "all"``) and
    everything (``group: "all"``). Look-alikes count under their original's group.
    """
    by_id = {c.id: c for c in cases}
    records: list[dict[str, Any]] = []
    versions: set[str] = set()
    for c in cases:
        resp = diagnose_fn(c.trace)
        versions.add(resp.model_version)
        original = by_id.get(c.lookalike_of) if c.lookalike_of else None
        rec = score_case(c, resp, kind=original.kind if original else None)
        if original is not None:
            rec["group"] = original.group
        records.append(rec)

    def select(failing: bool, group: str, language: str) -> list[dict[str, Any]]:
        return [r for r in records if ("caught" in r) == failing
                and (group == "all" or r["group"] == group) and (language == "all" or r["language"] == language)]

    caught_rows: list[dict[str, Any]] = []
    alike_rows: list[dict[str, Any]] = []
    for group in (*GROUPS, "all"):
        for language in (*LANGUAGES, "all"):
            fs = select(True, group, language)
            if fs:
                caught_rows.append({
                    "group": group, "language": language, "n": len(fs),
                    "caught": _rate(sum(r["caught"] for r in fs), len(fs)),
                    "at_index": _rate(sum(r["at_index"] for r in fs), len(fs)),
                    "kind_at_index": _rate(sum(r["kind_at_index"] for r in fs), len(fs)),
                })
            ls = select(False, group, language)
            if ls:
                alike_rows.append({"group": group, "language": language, "n": len(ls),
                                   "false_alarms": _rate(sum(r["false_alarm"] for r in ls), len(ls))})
    fired: dict[str, int] = {}
    for r in records:
        if "false_alarm" in r:
            for kind in sorted({f["kind"] for f in r["failures"]}):
                fired[kind] = fired.get(kind, 0) + 1
    pos = [r for r in records if "caught" in r]
    neg = [r for r in records if "false_alarm" in r]
    own: dict[str, Any] = {"auroc": _auroc([r["kind_confidence"] for r in pos], [r["kind_confidence"] for r in neg])}
    for cut in (0.3, 0.5):
        own[f"failing_at_least_{cut}"] = _rate(sum(r["kind_confidence"] >= cut for r in pos), len(pos))
        own[f"lookalikes_at_least_{cut}"] = _rate(sum(r["kind_confidence"] >= cut for r in neg), len(neg))
    return {
        "cases": len(records), "failing": len(pos), "lookalikes": len(neg),
        "model_versions": sorted(versions), "caught": caught_rows, "lookalike_rows": alike_rows,
        "lookalike_kinds_fired": fired, "auroc": _auroc([r["score"] for r in pos], [r["score"] for r in neg]),
        "own_kind": own, "per_case": records,
    }


# --------------------------------------------------------------------------------------------
# report


def _fmt(r: dict[str, Any]) -> str:
    lo, hi = r["ci95"]
    rate = r["rate"]
    pct = "–" if rate is None else f"{100 * rate:.0f} %"
    return f"{r['k']}/{r['n']} = {pct} [{100 * lo:.0f}–{100 * hi:.0f}]"


def render_markdown(result: dict[str, Any]) -> str:
    """The result of :func:`evaluate_cases` as Markdown tables (rates with Wilson 95 % intervals)."""
    lines = [
        f"Semantic cases: {result['failing']} failing, {result['lookalikes']} healthy look-alikes "
        f"(model {', '.join(result['model_versions']) or '?'}).",
        "",
        "| failing group | language | cases | caught (unhealthy) | at expected source_index | right kind there |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in result["caught"]:
        lines.append(f"| {row['group']} | {row['language']} | {row['n']} | {_fmt(row['caught'])} | "
                     f"{_fmt(row['at_index'])} | {_fmt(row['kind_at_index'])} |")
    lines += ["", "| look-alikes of | language | cases | false alarms (unhealthy) |", "| --- | --- | --- | --- |"]
    for row in result["lookalike_rows"]:
        lines.append(f"| {row['group']} | {row['language']} | {row['n']} | {_fmt(row['false_alarms'])} |")
    fired = result.get("lookalike_kinds_fired") or {}
    lines += ["", "Failure kinds raised on look-alikes: "
              + (", ".join(f"{k} ×{v}" for k, v in sorted(fired.items())) if fired else "none") + "."]
    auroc = result.get("auroc")
    lines.append("AUROC of the run score (failure_probability, else the highest failure/signal confidence), "
                 f"failing vs look-alikes: {'–' if auroc is None else f'{auroc:.2f}'}.")
    own = result.get("own_kind")
    if own:
        a = own["auroc"]
        lines.append("Highest confidence of the case's own kind (failure or signal; a look-alike: its original's): "
                     f"AUROC {'–' if a is None else f'{a:.2f}'}; ≥ 0.3 on {_fmt(own['failing_at_least_0.3'])} failing "
                     f"vs {_fmt(own['lookalikes_at_least_0.3'])} look-alikes; ≥ 0.5 on "
                     f"{_fmt(own['failing_at_least_0.5'])} vs {_fmt(own['lookalikes_at_least_0.5'])}.")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# the shipped diagnosis


def shipped_diagnose_fn(*, classifier: bool = True, runscore: bool = True) -> tuple[DiagnoseFn, bool]:
    """``diagnose_fn`` for the shipped model, as the service and ``triage diagnose`` serve it
    (:meth:`model.diagnosis.diagnoser.Diagnoser.with_shipped_models`): every default rule detector, plus the
    shipped classifier when ``classifier`` and its artefact is present, plus the shipped run scorer
    (``failure_probability`` and ``attribution``) when ``runscore`` and its artefact is present.
    Returns the function and whether the classifier is in it."""
    from model.diagnosis.diagnoser import Diagnoser
    from model.importers import load_trace

    diagnoser = Diagnoser.with_shipped_models(classifier=classifier, runscore=runscore)
    with_clf = "classifier" in diagnoser.detectors

    def diagnose(trace: dict[str, Any]) -> DiagnosisResponse:
        return diagnoser.diagnose(load_trace(trace))

    return diagnose, with_clf


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m model.training.semantic", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=str(DEFAULT_CASES), help="cases JSONL (default: %(default)s)")
    parser.add_argument("--no-classifier", action="store_true", help="without the classifier")
    parser.add_argument("--no-runscore", action="store_true", help="without the run scorer (failure_probability)")
    parser.add_argument("--json", dest="json_out", help="also write the full result (per case) to this file")
    args = parser.parse_args(argv)
    try:
        cases = load_cases(args.cases)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    fn, with_clf = shipped_diagnose_fn(classifier=not args.no_classifier, runscore=not args.no_runscore)
    result = evaluate_cases(cases, fn)
    result["classifier"] = with_clf
    sys.stdout.write(render_markdown(result))
    if not with_clf:
        print("(without the classifier: " + ("--no-classifier" if args.no_classifier else "artefact not found") + ")")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["GROUPS", "LANGUAGES", "SemanticCase", "evaluate_cases", "load_cases", "parse_cases",
           "render_markdown", "run_score", "score_case", "shipped_diagnose_fn", "wilson"]

"""Failure patterns: the stored diagnoses' failures and signals grouped, ranked by what they cost.

A **pattern** is every failure (or every signal) of one window that shares

* ``kind`` — the failure kind;
* ``tool`` — the tool at the failure's step (``None`` when the step is no tool's);
* ``signature`` — the evidence text normalised by :func:`signature`: quoted values, ids (UUIDs, hex
  strings, e-mails, URLs, words that mix letters and digits) and numbers masked, white space
  collapsed, so that one tool failing the same way in different runs — different order numbers,
  different request ids — is one pattern. A quoted value is one word (a name, an id, a path); a
  quoted phrase (it has a space: an error message in a JSON body) and a JSON key stay, their
  numbers and ids masked like the rest;
* ``agent`` — the run's agent (``None``: the tenant's pool);
* ``level`` — ``failure`` or ``signal`` (a signal is reported, not acted on);
* ``basis`` — ``rule`` (a detector's finding) or ``probability``: a run flagged **only** by the run
  scorer (its one failure has detector ``runscore``) is grouped by the kind and tool at its
  attribution's step, with the fixed signature :data:`PROBABILITY_SIGNATURE` (its evidence holds
  nothing but the probability). A ``runscore`` failure beside a detector's failure adds nothing.

Each pattern counts the **runs** it occurs in (a run with the same failure at two steps counts once)
and is ranked by ``score = runs × severity weight × (1 − repair success)``: the weight is
:data:`SEVERITY_WEIGHT` of its most severe member; the repair success is the share of the pattern's
runs whose recommendations for that kind got an outcome and ended in a successful one (``None`` and
counted as 0 when no outcome was reported: an untried repair has not shown it works). The trend
compares the run count with the previous window of the same length. Each pattern carries example
runs (newest first) and the repair record: per strategy, how often it was recommended to the
pattern's runs for that kind, how many outcomes came back and how many succeeded.

:func:`group_patterns` is pure: it reads :class:`Occurrence` and :class:`RepairEvent` records (the
store builds them: :meth:`serve.store.reports.ReportStore.pattern_inputs`) and returns :class:`Pattern` s.

>>> from datetime import UTC, datetime
>>> at = datetime(2026, 12, 1, tzinfo=UTC)
>>> occ = [Occurrence(f"run-{i}", at, None, "tool_error", "high", False, "tool_error", 3, "search",
...                   f"search failed: HTTP 503 for request id 7f3a9c{i}e2b1") for i in range(3)]
>>> (p,) = group_patterns(occ, [], since=at, until=at.replace(day=2))
>>> p.runs, p.tool, p.signature
(3, 'search', 'search failed: HTTP <n> for request id <id>')
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from model.core.errors import InputError

#: The detector name of the run scorer's failure (``model.diagnosis.diagnoser.RUNSCORE``; not imported so
#: that this module stays free of onnxruntime).
RUNSCORE_DETECTOR = "runscore"
#: The signature of a run flagged only by its failure probability.
PROBABILITY_SIGNATURE = "failure probability at or above the operating point"
#: Severity → weight in the score (``low`` 1 … ``critical`` 4).
SEVERITY_WEIGHT: dict[str, int] = {"low": 1, "medium": 2, "high": 3, "critical": 4}
#: Longest signature kept (characters, after masking).
MAX_SIGNATURE = 160

Level = Literal["failure", "signal"]
Basis = Literal["rule", "probability"]
Trend = Literal["new", "up", "down", "flat"]

_QUOTED = re.compile(r"'[^'\n]{0,400}'|\"[^\"\n]{0,400}\"|`[^`\n]{0,400}`|«[^»\n]{0,400}»|“[^”\n]{0,400}”"
                     # a quoted word cut off where the evidence was shortened ("/testbed/djan…)
                     r"|[\"'][^\"'\s]{1,400}…$")
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\"<>]+", re.IGNORECASE)
_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE)
_HEX = re.compile(r"\b(?:0x)?[0-9a-f]{8,}\b", re.IGNORECASE)
# a word holding a digit and a letter (order ABC123, call_8f2a, req-42b), or a path segment with one
_MIXED = re.compile(r"\b(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[\w-]{2,}\b")
_NUMBER = re.compile(r"\b\d+(?:[.,]\d+)*(?:e[-+]?\d+)?\b", re.IGNORECASE)
_KEY_AFTER = re.compile(r"\s*:")


def _quoted(m: re.Match[str]) -> str:
    if m.group(0).endswith("…"):
        return "<q>…"
    inner = m.group(0)[1:-1]
    if any(c.isspace() for c in inner) or _KEY_AFTER.match(m.string, m.end()):
        return m.group(0)  # a phrase or a JSON key: kept (its numbers and ids are masked below)
    return "<q>"
_SPACE = re.compile(r"\s+")


def signature(evidence: str) -> str:
    """The evidence with its run-specific parts masked (module docstring), at most
    :data:`MAX_SIGNATURE` characters.

    >>> signature('order "W2378156" not found (took 1.52 s, call_Xa81kq)')
    'order <q> not found (took <n> s, <id>)'
    >>> signature('File "/testbed/dj…')
    'File <q>…'
    >>> signature('{"error": "no flight HAT030 on 2024-05-13"}')
    '{"error": "no flight <id> on <n>-<n>-<n>"}'
    >>> signature("GET https://api.example.com/v1/users/88 returned 500")
    'GET <url> returned <n>'
    """
    text = _QUOTED.sub(_quoted, evidence)
    text = _URL.sub("<url>", text)
    text = _EMAIL.sub("<id>", text)
    text = _UUID.sub("<id>", text)
    text = _HEX.sub("<id>", text)
    text = _MIXED.sub("<id>", text)
    text = _NUMBER.sub("<n>", text)
    text = _SPACE.sub(" ", text).strip()
    return text if len(text) <= MAX_SIGNATURE else text[: MAX_SIGNATURE - 1] + "…"


@dataclass(frozen=True)
class Occurrence:
    """One failure or signal of a stored diagnosis (a row of the store's ``failures`` table)."""

    trace_id: str
    created_at: datetime
    agent: str | None
    kind: str
    severity: str
    is_signal: bool
    detector: str
    step: int | None
    tool: str | None
    evidence: str


@dataclass(frozen=True)
class RepairEvent:
    """One recommendation given to a run for a failure kind, and the outcomes reported for it
    (``succeeded``: any successful outcome; ``None``: no outcome came back)."""

    trace_id: str
    kind: str | None
    strategy: str
    outcomes: int
    succeeded: bool | None


@dataclass
class StrategyRecord:
    """How one strategy fared on a pattern's runs."""

    strategy: str
    recommended: int = 0
    outcomes: int = 0
    succeeded: int = 0


@dataclass(frozen=True)
class Example:
    trace_id: str
    created_at: datetime
    step: int | None


@dataclass
class Pattern:
    """One pattern of a window (module docstring); ``id`` is stable across windows and stores."""

    id: str
    level: Level
    basis: Basis
    kind: str
    tool: str | None
    signature: str
    agent: str | None
    severity: str
    runs: int
    occurrences: int
    previous_runs: int
    trend: Trend
    repair_success: float | None
    repaired_runs: int
    score: float
    first_seen: datetime
    last_seen: datetime
    examples: list[Example] = field(default_factory=list)
    repairs: list[StrategyRecord] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "level": self.level, "basis": self.basis, "kind": self.kind, "tool": self.tool,
            "signature": self.signature, "agent": self.agent, "severity": self.severity, "runs": self.runs,
            "occurrences": self.occurrences, "previous_runs": self.previous_runs, "trend": self.trend,
            "repair_success": self.repair_success, "repaired_runs": self.repaired_runs, "score": self.score,
            "first_seen": self.first_seen, "last_seen": self.last_seen,
            "examples": [{"trace_id": e.trace_id, "created_at": e.created_at, "step": e.step} for e in self.examples],
            "repairs": [{"strategy": r.strategy, "recommended": r.recommended, "outcomes": r.outcomes,
                         "succeeded": r.succeeded} for r in self.repairs],
        }


Key = tuple[str, str, str, str | None, str, str | None]  # level, basis, kind, tool, signature, agent


def pattern_id(key: Key) -> str:
    """A short stable id of a pattern's key (12 hex characters)."""
    raw = "\x1f".join("" if v is None else v for v in key)
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:12]


def _keys(occurrences: Iterable[Occurrence]) -> dict[Key, list[Occurrence]]:
    """Group ``occurrences`` by pattern key (the module docstring's rules)."""
    by_run_rule: set[str] = set()
    occurrences = list(occurrences)
    for o in occurrences:
        if not o.is_signal and o.detector != RUNSCORE_DETECTOR:
            by_run_rule.add(o.trace_id)
    sig_cache: dict[str, str] = {}
    groups: dict[Key, list[Occurrence]] = {}
    for o in occurrences:
        if o.detector == RUNSCORE_DETECTOR:
            if o.trace_id in by_run_rule:
                continue  # the run's detectors found its failure: the probability adds no pattern
            basis: Basis = "probability"
            sig = PROBABILITY_SIGNATURE
        else:
            basis = "rule"
            cached = sig_cache.get(o.evidence)
            if cached is None:
                cached = sig_cache[o.evidence] = signature(o.evidence)
            sig = cached
        key: Key = ("signal" if o.is_signal else "failure", basis, o.kind, o.tool, sig, o.agent)
        groups.setdefault(key, []).append(o)
    return groups


def group_patterns(
    occurrences: Sequence[Occurrence],
    repairs: Sequence[RepairEvent],
    *,
    since: datetime,
    until: datetime,
    previous: Sequence[Occurrence] = (),
    examples: int = 3,
    level: Literal["failure", "signal", "all"] = "all",
    limit: int | None = None,
) -> list[Pattern]:
    """The patterns of the window ``[since, until)``, best first (module docstring).

    Parameters
    ----------
    occurrences:
        The window's failures and signals (others are ignored).
    repairs:
        The recommendations given to the window's runs, with their outcomes.
    previous:
        The previous window's occurrences (for the trend).
    examples:
        Example runs kept per pattern (newest first).
    level:
        ``failure`` / ``signal``: only those; ``all``: both.
    limit:
        Keep the first ``limit`` patterns.

    Raises
    ------
    InputError
        ``until`` not after ``since``, or ``examples`` / ``limit`` negative.
    """
    if until <= since:
        raise InputError(f"the window must end after it starts; got since {since.isoformat()} and until "
                         f"{until.isoformat()}", path="until")
    if examples < 0:
        raise InputError(f"examples must be >= 0; got {examples}", path="examples")
    if limit is not None and limit < 0:
        raise InputError(f"limit must be >= 0; got {limit}", path="limit")
    current = [o for o in occurrences if since <= o.created_at < until]
    groups = _keys(current)
    prev_runs: dict[Key, set[str]] = {k: {o.trace_id for o in v} for k, v in _keys(previous).items()}
    by_run_kind: dict[tuple[str, str | None], list[RepairEvent]] = {}
    for r in repairs:
        by_run_kind.setdefault((r.trace_id, r.kind), []).append(r)
    out: list[Pattern] = []
    for key, members in groups.items():
        lvl = key[0]
        if level != "all" and lvl != level:
            continue
        kind = key[2]
        runs: dict[str, Occurrence] = {}
        for o in sorted(members, key=lambda o: (o.created_at, o.trace_id, o.step if o.step is not None else -1)):
            runs.setdefault(o.trace_id, o)  # the run's first occurrence
        severity = max((o.severity for o in members), key=lambda s: SEVERITY_WEIGHT.get(s, 0))
        records: dict[str, StrategyRecord] = {}
        tried = fixed = 0
        for tid in runs:
            events = by_run_kind.get((tid, kind), [])
            answered = [e for e in events if e.outcomes > 0]
            if answered:
                tried += 1
                fixed += any(e.succeeded for e in answered)
            for e in events:
                rec = records.setdefault(e.strategy, StrategyRecord(e.strategy))
                rec.recommended += 1
                rec.outcomes += e.outcomes
                rec.succeeded += bool(e.succeeded)
        success = fixed / tried if tried else None
        n = len(runs)
        before = len(prev_runs.get(key, ()))
        trend: Trend = "new" if before == 0 else "up" if n > before else "down" if n < before else "flat"
        newest = sorted(runs.values(), key=lambda o: (o.created_at, o.trace_id), reverse=True)[:examples]
        times = [o.created_at for o in runs.values()]
        out.append(
            Pattern(
                id=pattern_id(key), level=lvl, basis=key[1], kind=kind, tool=key[3],  # type: ignore[arg-type]
                signature=key[4], agent=key[5], severity=severity, runs=n, occurrences=len(members),
                previous_runs=before, trend=trend, repair_success=success, repaired_runs=tried,
                score=n * SEVERITY_WEIGHT.get(severity, 1) * (1.0 - (success or 0.0)),
                first_seen=min(times), last_seen=max(times),
                examples=[Example(o.trace_id, o.created_at, o.step) for o in newest],
                repairs=sorted(records.values(), key=lambda r: (-r.recommended, r.strategy)),
            )
        )
    out.sort(key=lambda p: (-p.score, -p.runs, p.kind, p.tool or "", p.signature, p.id))
    return out if limit is None else out[:limit]


__all__ = [
    "MAX_SIGNATURE",
    "PROBABILITY_SIGNATURE",
    "RUNSCORE_DETECTOR",
    "SEVERITY_WEIGHT",
    "Example",
    "Occurrence",
    "Pattern",
    "RepairEvent",
    "StrategyRecord",
    "group_patterns",
    "pattern_id",
    "signature",
]

"""Which agent ran a run that names none: a run's signature and the profile of an agent's runs.

PLACEHOLDER (h-agentsvc): a minimal, honest implementation of the interface the service codes
against; the lead replaces it with h-ident's measured algorithm. What it reads of a run:

- the template: hashed word 4-gram shingles of its system messages and first user message (the
  fixed parts of an agent's instructions recur in every run; the task text inside them does not);
- its tools (the definitions when the trace carries them, else the tools it called), its models,
  the span resource's ``service.name`` and the span names (what spans carry with content capture off).

An agent's profile counts these over its runs; a run matches it when the run's template shingles
are mostly among the profile's recurring ones and its tools, models and service are the profile's
(:meth:`AgentProfile.similarity`, each part weighted, parts the run or profile lack left out).

>>> from model.core.schema import Step, StepKind, Trace
>>> t = Trace(steps=[Step(kind=StepKind.SYSTEM, content="You are a helpful airline agent. Use the tools."),
...                  Step(kind=StepKind.TOOL_CALL, tool_name="book")])
>>> p = AgentProfile.from_signatures([signature(t)])
>>> round(p.similarity(signature(t)), 2)
1.0
>>> assign(signature(t), {"agent-x": p})
('agent-x', 1.0)
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from model.core.schema import StepKind, Trace

#: A run joins an agent whose profile it matches at least this well.
MATCH_THRESHOLD = 0.5
#: Shingles a profile keeps (the most frequent).
MAX_PROFILE_SHINGLES = 4000
#: Shingles of a signature (the opening's first words are the template's).
MAX_SIG_SHINGLES = 1500
#: A shingle recurs in an agent's runs when it is in at least this share of them.
RECURRING_SHARE = 0.3
EXCERPT_CHARS = 200
_WEIGHTS = {"template": 0.55, "tools": 0.25, "models": 0.1, "services": 0.1}
_WORD = re.compile(r"\w+")


def _shingles(text: str, n: int = 4) -> frozenset[int]:
    words = _WORD.findall(text.lower())
    grams = (" ".join(words[i:i + n]) for i in range(max(1, len(words) - n + 1))) if words else ()
    out = [int.from_bytes(hashlib.blake2b(g.encode(), digest_size=6).digest(), "big") for g in grams]
    return frozenset(out[:MAX_SIG_SHINGLES])


@dataclass(frozen=True)
class RunSignature:
    """What one run shows of its agent (see the module docstring)."""

    shingles: frozenset[int] = frozenset()
    tools: frozenset[str] = frozenset()
    models: frozenset[str] = frozenset()
    services: frozenset[str] = frozenset()
    span_names: frozenset[str] = frozenset()
    excerpt: str = ""  # the opening's first characters (shown, never compared)

    def to_json(self) -> dict[str, Any]:
        return {"shingles": sorted(self.shingles), "tools": sorted(self.tools), "models": sorted(self.models),
                "services": sorted(self.services), "span_names": sorted(self.span_names), "excerpt": self.excerpt}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RunSignature:
        sets = {k: frozenset(d.get(k) or ()) for k in ("shingles", "tools", "models", "services", "span_names")}
        return cls(**sets, excerpt=str(d.get("excerpt") or ""))


def signature(trace: Trace) -> RunSignature:
    """The run's signature: template shingles, tools, models, ``service.name``, span names."""
    opening = [s.content for s in trace.steps if s.kind == StepKind.SYSTEM and s.content]
    first_user = next((s.content for s in trace.steps if s.kind == StepKind.USER_INPUT and s.content), None)
    if first_user:
        opening.append(first_user)
    tools = {t.name for t in trace.tools} or {s.tool_name for s in trace.steps if s.tool_name}
    meta = trace.metadata if isinstance(trace.metadata, dict) else {}
    service = meta.get("service.name")
    span_names = {str(s.metadata.get("span.name")) for s in trace.steps if s.metadata.get("span.name")}
    return RunSignature(
        shingles=_shingles("\n".join(opening)),
        tools=frozenset(tools),
        models=frozenset(s.model for s in trace.steps if s.model),
        services=frozenset([service]) if isinstance(service, str) and service else frozenset(),
        span_names=frozenset(span_names),
        excerpt=" ".join("\n".join(opening).split())[:EXCERPT_CHARS],
    )


@dataclass
class AgentProfile:
    """Counts of what an agent's runs showed (see the module docstring)."""

    n_runs: int = 0
    shingles: Counter[int] = field(default_factory=Counter)
    tools: Counter[str] = field(default_factory=Counter)
    models: Counter[str] = field(default_factory=Counter)
    services: Counter[str] = field(default_factory=Counter)
    span_names: Counter[str] = field(default_factory=Counter)
    excerpt: str = ""

    def update(self, sig: RunSignature) -> None:
        """Count one more run of this agent."""
        self.n_runs += 1
        self.excerpt = self.excerpt or sig.excerpt
        self.shingles.update(sig.shingles)
        if len(self.shingles) > MAX_PROFILE_SHINGLES:
            self.shingles = Counter(dict(self.shingles.most_common(MAX_PROFILE_SHINGLES)))
        self.tools.update(sig.tools)
        self.models.update(sig.models)
        self.services.update(sig.services)
        self.span_names.update(sig.span_names)

    def _recurring(self) -> set[int]:
        least = max(1.0, RECURRING_SHARE * self.n_runs)
        return {h for h, c in self.shingles.items() if c >= least}

    def similarity(self, sig: RunSignature) -> float:
        """How well the run matches this agent, in [0, 1] (0 for an empty profile)."""
        if self.n_runs == 0:
            return 0.0
        parts: dict[str, float] = {}
        common = self._recurring()
        if sig.shingles and common:
            parts["template"] = len(sig.shingles & common) / min(len(sig.shingles), len(common))
        for name in ("tools", "models", "services"):
            mine: frozenset[str] = getattr(sig, name)
            known: Counter[str] = getattr(self, name)
            if mine and known:
                parts[name] = len(mine & set(known)) / len(mine)
            elif mine or known:
                parts[name] = 0.0
        if not parts:  # neither shows anything: nothing tells them apart
            return 1.0 if not sig.shingles and not self.shingles else 0.0
        total = sum(_WEIGHTS[k] for k in parts)
        return min(1.0, max(0.0, sum(_WEIGHTS[k] * v for k, v in parts.items()) / total))

    def describe(self) -> dict[str, Any]:
        """What a person reads of this agent: tools, models, service names, template excerpt, runs."""
        return {"tools": [t for t, _ in self.tools.most_common(20)], "models": [m for m, _ in self.models.most_common(5)],
                "service_names": [s for s, _ in self.services.most_common(5)], "template_excerpt": self.excerpt,
                "n_runs": self.n_runs}

    def to_json(self) -> dict[str, Any]:
        return {"n_runs": self.n_runs, "shingles": {str(k): v for k, v in self.shingles.items()},
                "tools": dict(self.tools), "models": dict(self.models), "services": dict(self.services),
                "span_names": dict(self.span_names), "excerpt": self.excerpt}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AgentProfile:
        return cls(n_runs=int(d.get("n_runs", 0)), shingles=Counter({int(k): int(v) for k, v in (d.get("shingles") or {}).items()}),
                   tools=Counter(d.get("tools") or {}), models=Counter(d.get("models") or {}),
                   services=Counter(d.get("services") or {}), span_names=Counter(d.get("span_names") or {}),
                   excerpt=str(d.get("excerpt") or ""))

    @classmethod
    def from_signatures(cls, sigs: Sequence[RunSignature]) -> AgentProfile:
        p = cls()
        for s in sigs:
            p.update(s)
        return p


def new_agent_key(sig: RunSignature) -> str:
    """A deterministic key for a new agent first seen with ``sig``, e.g. ``"agent-1a2b3c4d"``."""
    h = hashlib.sha256()
    for part in (sorted(sig.tools), sorted(sig.models), sorted(sig.services), sorted(sig.shingles)[:32]):
        h.update(repr(part).encode())
    return f"agent-{h.hexdigest()[:8]}"


def assign(sig: RunSignature, profiles: Mapping[str, AgentProfile]) -> tuple[str | None, float]:
    """The best-matching agent and its similarity when it reaches :data:`MATCH_THRESHOLD`, else
    ``(None, best similarity)`` (0.0 with no profile)."""
    best, best_key = 0.0, None
    for key in sorted(profiles):
        s = profiles[key].similarity(sig)
        if s > best:
            best, best_key = s, key
    return (best_key, best) if best_key is not None and best >= MATCH_THRESHOLD else (None, best)


__all__ = ["MATCH_THRESHOLD", "AgentProfile", "RunSignature", "assign", "new_agent_key", "signature"]

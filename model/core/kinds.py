"""Failure kinds, categories, severities and repair strategies: one enum each, in one place.

The table of kinds (docs/architecture.md, "Failure kinds") lives here as data (:data:`KIND_INFO`), so the response, the repair
policy, the classifier's label order and the docs all read the same facts.

>>> KIND_INFO[FailureKind.TOOL_ERROR].severity
<Severity.HIGH: 'high'>
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Category(StrEnum):
    TECHNICAL = "technical"
    LOGICAL = "logical"


class Severity(StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        """0 for low … 3 for critical, for ordering."""
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {Severity.LOW: 0, Severity.MEDIUM: 1, Severity.HIGH: 2, Severity.CRITICAL: 3}


class Producer(StrEnum):
    RULES = "rules"
    CLASSIFIER = "classifier"
    STREAMS = "streams"
    AGENT_MODEL = "agent_model"


class FailureKind(StrEnum):
    TOOL_ERROR = "tool_error"
    TIMEOUT = "timeout"
    RATE_LIMITED = "rate_limited"
    PROVIDER_ERROR = "provider_error"
    MALFORMED_CALL = "malformed_call"
    EMPTY_RESPONSE = "empty_response"
    INCOMPLETE = "incomplete"
    REFUSAL = "refusal"
    LOOP = "loop"
    IGNORED_ERROR = "ignored_error"
    HALLUCINATION = "hallucination"
    OFF_TOPIC = "off_topic"
    CONTEXT_LOSS = "context_loss"
    ASSUMPTION_VIOLATED = "assumption_violated"
    DISALLOWED_TOOL = "disallowed_tool"
    UNSAFE_OUTPUT = "unsafe_output"
    DEGRADATION = "degradation"
    AT_RISK = "at_risk"


class Strategy(StrEnum):
    RETRY = "retry"
    ADJUST_PARAMETERS = "adjust_parameters"
    SWITCH_TOOL = "switch_tool"
    SELF_CORRECT = "self_correct"
    CLARIFY = "clarify"
    REFRESH_CONTEXT = "refresh_context"
    ROLLBACK = "rollback"
    REPLAN_LOCAL = "replan_local"
    REPLAN_GLOBAL = "replan_global"
    FALLBACK_MODEL = "fallback_model"
    HUMAN_HANDOFF = "human_handoff"
    CONTINUE = "continue"


@dataclass(frozen=True)
class KindInfo:
    category: Category
    severity: Severity
    producers: frozenset[Producer]
    description: str


_R, _C, _S = Producer.RULES, Producer.CLASSIFIER, Producer.STREAMS
_T, _L = Category.TECHNICAL, Category.LOGICAL

KIND_INFO: dict[FailureKind, KindInfo] = {
    FailureKind.TOOL_ERROR: KindInfo(_T, Severity.HIGH, frozenset({_R}), "a tool call failed"),
    FailureKind.TIMEOUT: KindInfo(_T, Severity.MEDIUM, frozenset({_R}), "a call timed out"),
    FailureKind.RATE_LIMITED: KindInfo(_T, Severity.MEDIUM, frozenset({_R}), "a call was rate limited"),
    FailureKind.PROVIDER_ERROR: KindInfo(
        _T, Severity.HIGH, frozenset({_R}), "the LLM call itself failed"
    ),
    FailureKind.MALFORMED_CALL: KindInfo(
        _T, Severity.MEDIUM, frozenset({_R, _C}), "tool arguments are not valid JSON or break the schema"
    ),
    FailureKind.EMPTY_RESPONSE: KindInfo(_L, Severity.HIGH, frozenset({_R}), "the model answered nothing"),
    FailureKind.INCOMPLETE: KindInfo(
        _L, Severity.HIGH, frozenset({_R}), "the run ended without a final answer"
    ),
    FailureKind.REFUSAL: KindInfo(_L, Severity.MEDIUM, frozenset({_R, _C}), "the model refused the task"),
    FailureKind.LOOP: KindInfo(
        _L, Severity.HIGH, frozenset({_R}), "the same call repeated with no change in what comes back"
    ),
    FailureKind.IGNORED_ERROR: KindInfo(
        _L, Severity.CRITICAL, frozenset({_R, _C}), "a failed step followed by an answer as if it succeeded"
    ),
    FailureKind.HALLUCINATION: KindInfo(
        _L, Severity.CRITICAL, frozenset({_C}), "claims not backed by tool results"
    ),
    FailureKind.OFF_TOPIC: KindInfo(_L, Severity.HIGH, frozenset({_C}), "the answer drifted off the goal"),
    FailureKind.CONTEXT_LOSS: KindInfo(
        _L, Severity.HIGH, frozenset({_C}), "an earlier constraint was forgotten"
    ),
    FailureKind.ASSUMPTION_VIOLATED: KindInfo(
        _L, Severity.MEDIUM, frozenset({_R, _C}), "an empty result the plan needed"
    ),
    FailureKind.DISALLOWED_TOOL: KindInfo(
        _L, Severity.CRITICAL, frozenset({_R}), "a tool outside the request's allow-list was called"
    ),
    FailureKind.UNSAFE_OUTPUT: KindInfo(
        _L, Severity.CRITICAL, frozenset({_R, _C}), "the output is unsafe to pass on"
    ),
    FailureKind.DEGRADATION: KindInfo(
        _L, Severity.MEDIUM, frozenset({_S}), "a metric stream drifted"
    ),
    FailureKind.AT_RISK: KindInfo(
        _L, Severity.MEDIUM, frozenset({Producer.AGENT_MODEL}),
        "the agent's own model puts the run so far above its early-warning point (serve/services/agent_models.py)",
    ),
}

#: The kinds the classifier is trained on: those it is a producer of (docs/architecture.md,
#: "Failure kinds": it is trained only on the kinds it produces; the technical kinds, loops, incomplete runs
#: and disallowed tools have a shape the rules read exactly). Its label order is this tuple plus
#: ``healthy`` last; the artefact stores the order it used.
CLASSIFIER_KINDS: tuple[FailureKind, ...] = tuple(k for k, info in KIND_INFO.items() if _C in info.producers)
HEALTHY_LABEL = "healthy"

#: Kinds that describe how a run ended rather than what went wrong: on a tie (same severity, same
#: step) the primary failure is another kind, the cause.
SYMPTOM_KINDS: frozenset[FailureKind] = frozenset({FailureKind.INCOMPLETE})

__all__ = [
    "CLASSIFIER_KINDS",
    "Category",
    "FailureKind",
    "HEALTHY_LABEL",
    "KIND_INFO",
    "KindInfo",
    "Producer",
    "Severity",
    "Strategy",
    "SYMPTOM_KINDS",
]

"""Domain-general evidence, per agent message and per run, read off a :class:`~model.core.schema.Trace`.

The features say *where a message's content comes from* and *how the run went*, in ways that read
the same for any agent (no cue tables of one domain): a figure or name that no earlier input or
result holds, an error result that the next agent message passes over, a call that repeats an
earlier one, a hedged or empty answer, the message's place in the run. Counts are logged and
ratios bounded, so that no feature's scale depends on a domain's run length. Everything is linear
in the trace's characters (each text is read once, at most :data:`SCAN_CHARS` of it).

Units are **agent messages** (all the steps of one ``source_index`` an agent produced: its text,
its reasoning, its calls): the real sets label messages, and ``attribution.source_index`` names one.

>>> from model.core.schema import Step, Trace
>>> t = Trace(steps=[Step(kind="user_input", content="Price of AAPL?", source_index=0),
...                  Step(kind="final_output", content="It is 187.2 dollars.", source_index=1)])
>>> units, X = message_features(t)
>>> units[0].source_index, X[0, MESSAGE_FEATURES.index("novel_numbers")]
(1, 1.0)
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from model.core.graph import step_failure
from model.core.schema import Step, StepKind, StepStatus, Trace

#: Characters of one text that the features read (the head and the tail of longer ones).
SCAN_CHARS = 6000

AGENT_KINDS = frozenset({StepKind.LLM_OUTPUT, StepKind.FINAL_OUTPUT, StepKind.TOOL_CALL, StepKind.LLM_REASONING})
_SOURCE_KINDS = frozenset({StepKind.USER_INPUT, StepKind.TOOL_RESULT, StepKind.SYSTEM, StepKind.ERROR})

_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:[.,]\d+)*(?![\w])")
_WORD = re.compile(r"[^\W\d_\u4e00-\u9fff]{4,}", re.UNICODE)
_CJK = re.compile(r"[\u4e00-\u9fff]+")
_CAPITALISED = re.compile(r"\b[A-Z][a-z]{2,}(?:\s+[A-Z][a-z]{2,})*")
# Hedges and give-ups: the agent says it could not do or know (English and Chinese).
_HEDGE = re.compile(
    r"\b(?:unable to|cannot|can't|could not|couldn't|not able to|no (?:information|results?|data)|"
    r"not sure|unclear|unfortunately|i apologi[sz]e|sorry|don't have access|not found|"
    r"does not (?:exist|appear)|no (?:record|mention))\b|无法|抱歉|没有找到|不确定|未能",
    re.IGNORECASE,
)
_ERROR_WORDS = re.compile(
    r"\b(?:error|exception|traceback|failed|failure|invalid|not found|denied|refused)\b", re.IGNORECASE)
_STOPWORDS = frozenset(["this", "that", "with", "from", "have", "will", "would", "could", "should", "there", "their", "they", "them", "then", "than", "what", "when", "where", "which", "while", "about", "into", "your", "yours", "ours", "also", "been", "being", "some", "such", "only", "other", "more", "most", "very", "just", "like", "make", "made", "does", "done", "here", "please", "thank", "thanks", "sure", "okay", "yes", "none"])


def scan_text(text: str) -> str:
    """The part of ``text`` the features read: all of it up to :data:`SCAN_CHARS` characters, else its
    first and last ``SCAN_CHARS // 2`` joined by a newline (so reading a message costs at most that)."""
    if len(text) <= SCAN_CHARS:
        return text
    half = SCAN_CHARS // 2
    return text[:half] + "\n" + text[-half:]


def step_text(step: Step) -> str:
    """The text a step shows the features: a tool call's name and raw arguments (its parsed ones
    when no raw text was recorded), any other step's content (``""`` when it has none)."""
    if step.kind is StepKind.TOOL_CALL:
        args = step.tool_args_raw if step.tool_args_raw is not None else (str(step.tool_args) if step.tool_args else "")
        return f"{step.tool_name or ''} {args}"
    return step.content or ""


def _numbers(text: str) -> set[str]:
    return {m.group().replace(",", "").lstrip("-") for m in _NUMBER.finditer(text)}


def _words(text: str) -> set[str]:
    """Content words: Latin-script words of 4+ letters, and every *overlapping* pair of CJK characters
    (Chinese has no spaces: non-overlapping pairs would depend on where a run of characters starts,
    so the same phrase in another sentence would read as new words)."""
    words = {w.lower() for w in _WORD.findall(text)} - _STOPWORDS
    for run in _CJK.findall(text):
        words.update(run[i:i + 2] for i in range(len(run) - 1))
    return words


def _names(text: str) -> set[str]:
    return {m.group().lower() for m in _CAPITALISED.finditer(text)}


def is_error_step(step: Step) -> bool:
    """Whether ``step`` reports an error: an ``error`` step, an ``error`` / ``timeout`` status, or a tool
    result whose text :func:`~model.core.graph.step_failure` reads as a failure."""
    if step.kind is StepKind.ERROR or step.status in (StepStatus.ERROR, StepStatus.TIMEOUT):
        return True
    return step.kind is StepKind.TOOL_RESULT and step_failure(step) is not None


def _call_key(step: Step) -> str:
    args = step.tool_args_raw if step.tool_args_raw is not None else repr(sorted((step.tool_args or {}).items()))
    return f"{step.tool_name}\x00{' '.join(str(args).lower().split())}"


@dataclass(frozen=True)
class MessageUnit:
    """One agent message: its ``source_index``, its steps (indices into ``Trace.steps``), its speaker."""

    source_index: int
    steps: tuple[int, ...]
    speaker: str | None


#: Per-message feature names, in column order.
MESSAGE_FEATURES: tuple[str, ...] = (
    "bias",
    "rel_position",          # 0 first message … 1 last
    "first_agent_message",
    "last_agent_message",
    "agent_ordinal_log",     # log1p(k) for the k-th agent message (0-based); the position ends here
    "has_call",
    "is_final",
    "novel_numbers",         # log1p(# figures nowhere in earlier messages)
    "novel_names",           # log1p(# capitalised names nowhere earlier)
    "novel_word_ratio",      # share of its content words not in earlier messages
    "after_error",           # the result right before it is an error
    "error_passed_over",     # … and it neither mentions the error nor retries the call
    "repeat_call",           # one of its calls repeats an earlier call exactly
    "hedge",                 # it says it could not (find / do / know)
    "length_log",            # log1p(characters) / 10
    "empty",                 # no text and no call
    "after_user",            # the message right before it is the user's
)

#: The message features that say where a message sits, nothing of its content (``bias`` too): the
#: first five columns.
POSITION_FEATURES: tuple[str, ...] = MESSAGE_FEATURES[:5]

#: Run-level feature names, in column order (see :func:`run_features`).
RUN_FEATURES: tuple[str, ...] = (
    "bias",
    "messages_log",
    "calls_log",
    "error_result_ratio",
    "repeat_call_ratio",
    "final_hedge",
    "final_novel_word_ratio",
    "final_novel_numbers",
    "no_final_answer",
    "errors_passed_over",
    "user_turns_log",
)


def agent_units(trace: Trace) -> list[MessageUnit]:
    """The trace's agent messages, in order."""
    groups: dict[int, list[int]] = {}
    for i, s in enumerate(trace.steps):
        if s.kind in AGENT_KINDS:
            groups.setdefault(s.source_index, []).append(i)
    return [MessageUnit(si, tuple(idx), trace.steps[idx[0]].speaker) for si, idx in sorted(groups.items())]


def message_features(trace: Trace, *, content: bool = True) -> tuple[list[MessageUnit], np.ndarray]:
    """Features of every agent message (rows, :data:`MESSAGE_FEATURES` columns).

    ``content=False`` fills only :data:`POSITION_FEATURES` (the others stay 0) without reading a text:
    what a position-only attribution needs."""
    steps = trace.steps
    units = agent_units(trace)
    X = np.zeros((len(units), len(MESSAGE_FEATURES)), dtype=np.float32)
    if not units:
        return units, X
    n_msgs = max(s.source_index for s in steps) + 1
    for k, u in enumerate(units):  # POSITION_FEATURES, in their column order
        X[k, :len(POSITION_FEATURES)] = (1.0, u.source_index / max(1, n_msgs - 1), float(k == 0),
                                         float(k == len(units) - 1), math.log1p(k))
    if not content:
        return units, X
    col = {name: j for j, name in enumerate(MESSAGE_FEATURES)}
    unit_at = {u.source_index: k for k, u in enumerate(units)}
    seen_numbers: set[str] = set()
    seen_words: set[str] = set()
    seen_names: set[str] = set()
    seen_calls: set[str] = set()
    last_source: Step | None = None  # the newest non-agent step before the current message
    last_source_error = False
    prev_was_user = False
    current = -1
    acc_text: list[str] = []
    handled = np.zeros(len(units), dtype=bool)

    def close(k: int) -> None:
        # fold message k's own content into what later messages may draw on
        text = "\n".join(acc_text)
        seen_numbers.update(_numbers(text))
        seen_words.update(_words(text))
        seen_names.update(_names(text))
        acc_text.clear()

    for s in steps:
        if s.kind not in AGENT_KINDS:
            if current >= 0:
                close(current)
                current = -1
            text = scan_text(s.content or "")
            seen_numbers.update(_numbers(text))
            seen_words.update(_words(text))
            seen_names.update(_names(text))
            if s.kind in _SOURCE_KINDS:
                last_source = s
                last_source_error = is_error_step(s)
                prev_was_user = s.kind is StepKind.USER_INPUT
            continue
        k = unit_at[s.source_index]
        row = X[k]
        if k != current:
            if current >= 0:
                close(current)
            current = k
            row[col["after_error"]] = float(last_source_error)
            row[col["after_user"]] = float(prev_was_user)
            row[col["empty"]] = 1.0
        text = scan_text(step_text(s))
        acc_text.append(text)
        if text.strip():
            row[col["empty"]] = 0.0
        row[col["length_log"]] += len(text)
        if s.kind is StepKind.TOOL_CALL:
            row[col["has_call"]] = 1.0
            key = _call_key(s)
            if key in seen_calls:
                row[col["repeat_call"]] = 1.0
            seen_calls.add(key)
        if s.kind is StepKind.FINAL_OUTPUT:
            row[col["is_final"]] = 1.0
        if s.kind in (StepKind.LLM_OUTPUT, StepKind.FINAL_OUTPUT):
            nums, words, names = _numbers(text), _words(text), _names(text)
            row[col["novel_numbers"]] += len(nums - seen_numbers)
            row[col["novel_names"]] += len(names - seen_names)
            if words:
                row[col["novel_word_ratio"]] = max(row[col["novel_word_ratio"]], len(words - seen_words) / len(words))
            if _HEDGE.search(text):
                row[col["hedge"]] = 1.0
        if last_source_error and last_source is not None and (
            _ERROR_WORDS.search(text) or _HEDGE.search(text)
            or (s.kind is StepKind.TOOL_CALL and s.tool_name == last_source.tool_name)
        ):
            handled[k] = True  # it names the failure, or makes the failed call again
    # an error passed over: the message after an error result neither names it nor retries the call
    X[:, col["error_passed_over"]] = X[:, col["after_error"]] * (~handled)
    for j in ("novel_numbers", "novel_names"):
        X[:, col[j]] = np.log1p(X[:, col[j]])
    X[:, col["length_log"]] = np.log1p(X[:, col["length_log"]]) / 10.0
    return units, X


def run_features(trace: Trace, units: Sequence[MessageUnit], X: np.ndarray) -> np.ndarray:
    """Run-level features (:data:`RUN_FEATURES`) from the trace and its message features."""
    col = {name: j for j, name in enumerate(MESSAGE_FEATURES)}
    steps = trace.steps
    results = [s for s in steps if s.kind is StepKind.TOOL_RESULT or s.kind is StepKind.ERROR]
    calls = sum(1 for s in steps if s.kind is StepKind.TOOL_CALL)
    n_msgs = (max(s.source_index for s in steps) + 1) if steps else 0
    final = [k for k in range(len(units)) if X[k, col["is_final"]] or X[k, col["last_agent_message"]]]
    f = final[-1] if final else None
    out = np.zeros(len(RUN_FEATURES), dtype=np.float32)
    out[0] = 1.0
    out[1] = math.log1p(n_msgs)
    out[2] = math.log1p(calls)
    out[3] = sum(is_error_step(s) for s in results) / len(results) if results else 0.0
    out[4] = float(X[:, col["repeat_call"]].sum() / max(1, X[:, col["has_call"]].sum())) if len(units) else 0.0
    if f is not None:
        out[5] = X[f, col["hedge"]]
        out[6] = X[f, col["novel_word_ratio"]]
        out[7] = X[f, col["novel_numbers"]]
    out[8] = float(not any(s.kind is StepKind.FINAL_OUTPUT for s in steps))
    out[9] = math.log1p(float(X[:, col["error_passed_over"]].sum())) if len(units) else 0.0
    out[10] = math.log1p(sum(1 for s in steps if s.kind is StepKind.USER_INPUT))
    return out


__all__ = ["AGENT_KINDS", "MESSAGE_FEATURES", "POSITION_FEATURES", "RUN_FEATURES", "SCAN_CHARS", "MessageUnit", "agent_units",
           "is_error_step", "message_features", "run_features", "scan_text", "step_text"]

"""The repair ladders: a ladder of strategies per failure kind, and the recommendation for a rung.

The default ladders ship in ``model/policy.yaml``; :meth:`Ladders.load` reads a user's file with the
same shape over them (kind by kind). This module is stateless: it answers "what is rung ``r`` for
this failure"; which rung a failure is on, and the budgets, are kept by the caller (the service's
session state) and passed in.

>>> from model.core.kinds import FailureKind
>>> Ladders.load().ladder(FailureKind.LOOP)[0].strategy
<Strategy.ROLLBACK: 'rollback'>
"""

from __future__ import annotations

import hashlib
import random
import re
import uuid
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from model.core.errors import InputError
from model.core.findings import Failure, Recommendation
from model.core.kinds import FailureKind, Strategy
from model.core.options import DiagnoseOptions
from model.core.paths import POLICY
from model.core.schema import StepKind, Trace

DEFAULT_POLICY_PATH = POLICY
_REC_NAMESPACE = uuid.UUID("6f1b7c52-0d8e-4c1e-9a55-2b7f1f0c9a10")
_CJK = re.compile(r"[\u4e00-\u9fff]")


class Rung(BaseModel):
    """One strategy on a ladder, with its fixed parameters."""

    model_config = ConfigDict(extra="forbid")

    strategy: Strategy
    params: dict[str, Any] = Field(default_factory=dict)


class RetryDefaults(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_delay_s: float = Field(default=1.0, gt=0)
    max_delay_s: float = Field(default=30.0, gt=0)
    max_attempts: int = Field(default=3, ge=1)
    jitter: float = Field(default=0.25, ge=0, le=1)


class PolicyDefaults(BaseModel):
    model_config = ConfigDict(extra="allow")

    retry: RetryDefaults = Field(default_factory=RetryDefaults)


class PolicyFile(BaseModel):
    """The shape of a policy YAML file."""

    model_config = ConfigDict(extra="allow")

    version: int = 1
    defaults: PolicyDefaults = Field(default_factory=PolicyDefaults)
    ladders: dict[FailureKind, list[Rung]] = Field(default_factory=dict)


def _read_policy(path: Path) -> PolicyFile:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise InputError(f"cannot read policy file: {exc.strerror}", path=str(path)) from exc
    except yaml.YAMLError as exc:
        raise InputError(f"policy file is not valid YAML: {exc}", path=str(path)) from exc
    try:
        return PolicyFile.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise InputError(f"{err['msg']} (got {err.get('input')!r})", path=f"{path}:{loc}") from exc


def trace_language(trace: Trace) -> str:
    """``trace.language`` when set, else ``"zh"`` when the user's words are mostly Chinese."""
    if trace.language:
        return trace.language
    parts: list[str] = []
    size = 0
    for s in trace.steps:  # the first 2,000 characters of what the user said (stop there)
        if s.kind == StepKind.USER_INPUT:
            parts.append(s.content)
            size += len(s.content) + 1
            if size > 2000:
                break
    return _language_of(" ".join(parts)[:2000])


def language_more(trace: Trace, memo: dict[str, Any]) -> str:
    """:func:`trace_language` of a trace that grew since the last call, reading only its new steps.

    ``memo`` (JSON, kept by the caller between calls; updated): the user's words read so far (the
    first 2,000 characters, where :func:`trace_language` stops). A trace shorter than what was
    read is read again.

    >>> from model.core.schema import Step
    >>> t, memo = Trace(steps=[Step(kind="user_input", content="hi")]), {}
    >>> language_more(t, memo), memo["upto"]
    ('en', 1)
    >>> t.steps.append(Step(kind="user_input", content="你好，请帮我订一张去北京的机票"))
    >>> language_more(t, memo) == trace_language(t) == "zh"
    True
    """
    if trace.language:
        return trace.language
    n = len(trace.steps)
    if int(memo.get("upto", 0)) > n:
        memo.clear()
    text, size, parts = str(memo.get("text", "")), int(memo.get("size", 0)), int(memo.get("parts", 0))
    i = int(memo.get("upto", 0))
    while size <= 2000 and i < n:
        s = trace.steps[i]
        if s.kind == StepKind.USER_INPUT:
            text = (f"{text} {s.content}" if parts else s.content)[:2000]  # (shorter than 2,000 until the end)
            parts += 1
            size += len(s.content) + 1
        i += 1
    memo.update(upto=n if size <= 2000 else i, text=text, size=size, parts=parts)
    return _language_of(text)


def _language_of(text: str) -> str:
    if text and len(_CJK.findall(text)) >= max(2, len(text) // 10):
        return "zh"
    return "en"


_INSTRUCTIONS: dict[Strategy, dict[str, str]] = {
    Strategy.RETRY: {
        "en": "Retry the failed call{tool} after {delay_s:.1f} s (attempt {attempt} of {max_attempts}).",
        "zh": "等待 {delay_s:.1f} 秒后重试失败的调用{tool}（第 {attempt} 次，共 {max_attempts} 次）。",
    },
    Strategy.ADJUST_PARAMETERS: {
        "en": "Retry with adjusted parameters (longer timeout, smaller request, lower temperature).",
        "zh": "调整参数后重试（更长的超时、更小的请求、更低的温度）。",
    },
    Strategy.SWITCH_TOOL: {
        "en": "The tool {failed_tool} keeps failing; use {alternative} instead.",
        "zh": "工具 {failed_tool} 持续失败；请改用 {alternative}。",
    },
    Strategy.SELF_CORRECT: {
        "en": "Your last step has a problem: {evidence} Re-read the user's request and the tool results "
        "above, correct your answer, and state only what the tool results support.",
        "zh": "你的上一步有问题：{evidence} 请重新阅读用户的请求和上面的工具结果，修正你的回答，只陈述工具结果支持的内容。",
    },
    Strategy.CLARIFY: {
        "en": "Ask the user one short clarifying question before going on.",
        "zh": "在继续之前，先向用户提一个简短的澄清问题。",
    },
    Strategy.REFRESH_CONTEXT: {
        "en": "Summarise the user's goal and every constraint stated so far, then continue from that "
        "summary. Constraints stated earlier still apply.",
        "zh": "请总结用户的目标和迄今提出的所有约束条件，然后基于该总结继续。之前提出的约束条件仍然有效。",
    },
    Strategy.ROLLBACK: {
        "en": "Roll back: discard every step after step {to_step}, then {then}.",
        "zh": "回滚：丢弃第 {to_step} 步之后的所有步骤，然后{then}。",
    },
    Strategy.REPLAN_LOCAL: {
        "en": "Make a new plan for the current sub-task; the current approach is not working.",
        "zh": "为当前子任务重新制定计划；当前的方法行不通。",
    },
    Strategy.REPLAN_GLOBAL: {
        "en": "Stop and make a new plan for the whole task from the user's original request.",
        "zh": "停下来，根据用户最初的请求为整个任务重新制定计划。",
    },
    Strategy.FALLBACK_MODEL: {
        "en": "Repeat the step with the fallback model {model}.",
        "zh": "使用备用模型 {model} 重新执行这一步。",
    },
    Strategy.HUMAN_HANDOFF: {
        "en": "Stop and hand the run to a human operator{blocked}.",
        "zh": "停止运行并转交人工处理{blocked}。",
    },
    Strategy.CONTINUE: {"en": "No failure found; continue.", "zh": "未发现故障；继续。"},
}


_THEN: dict[str, dict[str, str]] = {
    "en": {
        "retry": "make the failed call again",
        "replan_local": "plan the current sub-task anew instead of repeating the same call",
    },
    "zh": {"retry": "重新发起失败的调用", "replan_local": "为当前子任务重新制定计划，不要重复同样的调用"},
}


def recommendation_id(trace_id: str, failure: Failure | None, rung: int) -> str:
    """A stable id: the same open failure on the same rung gets the same id."""
    key = f"{trace_id}|{failure.kind if failure else 'none'}|{failure.source_index if failure else ''}|{rung}"
    return str(uuid.uuid5(_REC_NAMESPACE, key))


def _before_call(trace: Trace, step: int | None) -> int | None:
    """The step just before the call that produced result ``step``: rolling back there lets the
    agent make the call again (rollback to the failed step, then retry: docs/architecture.md, "Where things live")."""
    if step is None or step >= len(trace.steps):
        return step
    result = trace.steps[step]
    if result.kind == StepKind.TOOL_RESULT:
        for i in range(step - 1, -1, -1):
            s = trace.steps[i]
            if s.kind == StepKind.TOOL_CALL and (
                (result.call_id and s.call_id == result.call_id)
                or (not result.call_id and s.tool_name == result.tool_name)
            ):
                return max(0, i - 1)
    return max(0, step - 1)


def is_transient(failure: Failure) -> bool:
    """5xx, connection resets and timeout-like errors are worth retrying; 4xx are not."""
    transient = failure.details.get("transient")
    if isinstance(transient, bool):
        return transient
    status = failure.details.get("http_status")
    if isinstance(status, int):
        return status >= 500 or status in (408, 425, 429)
    text = f"{failure.evidence} {failure.details.get('error_type', '')}".lower()
    permanent = ("not found", "invalid", "unauthori", "forbidden", "permission", "bad request")
    return not any(word in text for word in permanent)


class Ladders:
    """Repair ladders per failure kind.

    Parameters
    ----------
    file:
        The validated policy file; use :meth:`load` to read one.
    """

    def __init__(self, file: PolicyFile) -> None:
        self.file = file

    @classmethod
    def load(cls, path: Path | None = None) -> Ladders:
        """The shipped default, with ``path`` (a user's policy YAML) laid over it kind by kind."""
        base = _read_policy(DEFAULT_POLICY_PATH)
        if path is not None:
            user = _read_policy(path)
            base.ladders.update(user.ladders)
            if "defaults" in user.model_fields_set:
                base.defaults = user.defaults
        for kind, ladder in base.ladders.items():
            if not ladder or ladder[-1].strategy != Strategy.HUMAN_HANDOFF:
                raise InputError(
                    f"every ladder must end in human_handoff; {kind.value!r} ends in "
                    f"{ladder[-1].strategy.value if ladder else 'nothing'!r}",
                    path=f"ladders.{kind.value}",
                )
        return cls(base)

    def ladder(self, kind: FailureKind) -> list[Rung]:
        """The ladder for ``kind`` (a kind without one goes straight to ``human_handoff``)."""
        return self.file.ladders.get(kind) or [Rung(strategy=Strategy.HUMAN_HANDOFF)]

    def recommend(
        self,
        trace: Trace,
        failure: Failure | None,
        *,
        options: DiagnoseOptions | None = None,
        rung: int = 0,
        attempt: int = 1,
        budgets: dict[str, Any] | None = None,
    ) -> Recommendation:
        """The recommendation for ``failure`` on rung ``rung`` (0 = cheapest).

        ``failure=None`` (healthy) or ``options.shadow`` gives ``continue``. A rung past the top
        of the ladder gives ``human_handoff``.
        """
        options = options or DiagnoseOptions()
        lang = "zh" if trace_language(trace) == "zh" else "en"
        if failure is None or options.shadow:
            rationale = "no failure found" if failure is None else (
                f"shadow mode: {failure.kind.value} at step {failure.step} observed, not acted on"
            )
            return Recommendation(
                id=recommendation_id(trace.id, failure, 0),
                strategy=Strategy.CONTINUE,
                instruction=_INSTRUCTIONS[Strategy.CONTINUE][lang],
                rationale=rationale,
                budgets=budgets or {},
            )
        ladder = self.ladder(failure.kind)
        idx = min(rung, len(ladder) - 1)
        # A rung marked only_if_transient (retrying a tool error) is skipped for a permanent error
        # such as HTTP 400/404: retrying those cannot help.
        while (
            idx < len(ladder) - 1
            and ladder[idx].params.get("only_if_transient")
            and not is_transient(failure)
        ):
            idx += 1
        current = ladder[idx]
        params = dict(current.params)
        params.update(self._params_for(current.strategy, trace, failure, options, attempt))
        if "max_attempts" in current.params:  # the rung's own limit (the engine climbs by it), not the default
            params["max_attempts"] = current.params["max_attempts"]
        instruction = self._instruction(current.strategy, lang, failure, params)
        rationale = (
            f"{failure.kind.value} ({failure.severity.value}) at step {failure.step}; "
            f"rung {idx + 1} of {len(ladder)} on its ladder"
        )
        return Recommendation(
            id=recommendation_id(trace.id, failure, idx),
            strategy=current.strategy,
            params=params,
            instruction=instruction,
            rationale=rationale,
            next=[r.strategy for r in ladder[idx + 1 :]],
            budgets=budgets or {},
        )

    # -- parameters that make a rung directly usable ------------------------------------------
    def _params_for(
        self,
        strategy: Strategy,
        trace: Trace,
        failure: Failure,
        options: DiagnoseOptions,
        attempt: int,
    ) -> dict[str, Any]:
        details = failure.details
        step = trace.steps[failure.step] if failure.step is not None and failure.step < len(trace.steps) else None
        failed_tool = details.get("tool") or (step.tool_name if step is not None else None)
        out: dict[str, Any] = {}
        if strategy == Strategy.RETRY:
            d = self.file.defaults.retry
            # Deterministic jitter per (trace, failure, attempt): the same question, the same answer.
            seed = hashlib.sha256(f"{trace.id}|{failure.source_index}|{attempt}".encode()).digest()
            rng = random.Random(seed)
            delay = min(d.max_delay_s, d.base_delay_s * 2 ** (attempt - 1))
            delay *= 1 + rng.uniform(-d.jitter, d.jitter)
            retry_after = details.get("retry_after")
            if isinstance(retry_after, int | float) and retry_after > delay:
                delay = float(retry_after)
            out.update(delay_s=round(delay, 3), attempt=attempt, max_attempts=d.max_attempts)
            if retry_after is not None:
                out["retry_after"] = retry_after
            if failed_tool:
                out["tool"] = failed_tool
        elif strategy == Strategy.SWITCH_TOOL:
            out["failed_tool"] = failed_tool
            alternatives = options.tool_equivalents.get(failed_tool or "", [])
            out["alternatives"] = alternatives
            out["switch_to"] = alternatives[0] if alternatives else None
        elif strategy == Strategy.ROLLBACK:
            repeats = details.get("repeats")
            if isinstance(repeats, list) and repeats and isinstance(repeats[0], dict):
                # The loop rule lists each repeat's call and result steps: go back to just before
                # the first repeated call.
                first = repeats[0].get("call_step", repeats[0].get("step"))
                out["to_step"] = max(0, int(first) - 1) if isinstance(first, int) else failure.step
            else:
                failed = details.get("failed_step")
                target = failed if isinstance(failed, int) else failure.step
                out["to_step"] = _before_call(trace, target)
            # The same target for an executor that keeps messages, not steps: restore the state
            # from before the message that holds the first discarded step.
            first_undone = out["to_step"] + 1 if isinstance(out["to_step"], int) else None
            if first_undone is not None and first_undone < len(trace.steps):
                source_index = trace.steps[first_undone].source_index
                if source_index is not None:
                    out["to_source_index"] = source_index
        elif strategy == Strategy.FALLBACK_MODEL:
            out["model"] = options.fallback_models[0] if options.fallback_models else None
        elif strategy == Strategy.SELF_CORRECT and failure.kind == FailureKind.MALFORMED_CALL:
            tool = next((t for t in trace.tools if t.name == failed_tool), None)
            if tool is not None and tool.parameters is not None:
                out["tool_schema"] = tool.parameters
        return out

    def _instruction(
        self, strategy: Strategy, lang: str, failure: Failure, params: dict[str, Any]
    ) -> str:
        template = _INSTRUCTIONS[strategy][lang]
        values: dict[str, Any] = {
            "tool": f" ({params['tool']})" if params.get("tool") else "",
            "delay_s": params.get("delay_s", 0.0),
            "attempt": params.get("attempt", 1),
            "max_attempts": params.get("max_attempts", 1),
            "failed_tool": params.get("failed_tool") or "the tool",
            "alternative": params.get("switch_to") or "an equivalent tool",
            "evidence": (failure.evidence.rstrip(".") + ".") if failure.evidence else "",
            "to_step": params.get("to_step", failure.step),
            "then": _THEN[lang].get(str(params.get("then")), _THEN[lang]["replan_local"]),
            "model": params.get("model") or "(name one in options.fallback_models)",
            "blocked": (" (output blocked)" if lang == "en" else "（输出已拦截）")
            if params.get("block")
            else "",
        }
        return template.format(**values)


__all__ = ["DEFAULT_POLICY_PATH", "Ladders", "PolicyFile", "Rung", "is_transient", "language_more", "recommendation_id",
           "trace_language"]

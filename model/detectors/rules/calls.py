"""Tool calls that should not have been made as they were: ``malformed_call`` (arguments that are not
JSON, not an object, or break the tool's schema; a tool the trace does not define) and
``disallowed_tool`` (a tool outside the request's allow-list)."""

from __future__ import annotations

import json
from typing import Any, ClassVar

from model.core.errors import InputError
from model.core.findings import Finding
from model.core.graph import ExecutionGraph
from model.core.json_schema import schema_problems
from model.core.kinds import FailureKind
from model.core.schema import StepKind, Trace
from model.detectors.rules.common import RECOVERED_CONFIDENCE, Rule, excerpt, make_finding


class MalformedCallRule(Rule):
    """A tool call whose arguments are not valid JSON (0.95), not a JSON object (0.9), break the
    tool's JSON Schema when the trace carries tool definitions (0.9), or name a tool the trace's
    definitions don't have (0.4, a signal). The finding is on the call step.

    A malformed call the agent then corrected — a later call of the same tool, before the user
    speaks again, got a result that did not fail — is a signal (:data:`RECOVERED_CONFIDENCE`, ``details.recovered``), as a failed
    tool step recovered by a later success is: on real runs the AgentProcessBench search agent sent
    cut-off JSON, got ``{"error": "missing query_list/query"}``, called again and answered right
    (2 of 134 successful runs flagged)."""

    name: ClassVar[str] = "malformed_call"
    kinds: ClassVar[tuple[FailureKind, ...]] = (FailureKind.MALFORMED_CALL,)

    def inspect(self, trace: Trace) -> list[Finding]:
        out = self._inspect(trace)
        if not out:
            return out
        graph = ExecutionGraph.from_trace(trace, data_flow=False)
        steps = trace.steps
        ok_calls = sorted(c for c, r in graph.result_of_call.items()
                          if r not in graph.failures and c not in graph.failures)
        for f in out:
            assert f.step is not None
            tool = steps[f.step].tool_name or ""
            # corrected in the same turn: before the user speaks again (a new task may call it anew)
            turn_end = next((j for j in range(f.step + 1, len(steps)) if steps[j].kind is StepKind.USER_INPUT),
                            len(steps))
            later = next((c for c in ok_calls if f.step < c < turn_end and (steps[c].tool_name or "") == tool), None)
            if later is not None and f.confidence > RECOVERED_CONFIDENCE:
                f.confidence = RECOVERED_CONFIDENCE
                f.details["recovered"] = True
                f.details["recovered_by_step"] = later
        return out

    def inspect_steps(self, trace: Trace) -> list[Finding]:
        """Every malformed call, corrected later or not (the step-level fact: labelling votes it)."""
        return self._inspect(trace)

    def _inspect(self, trace: Trace) -> list[Finding]:
        tools = {t.name: t for t in trace.tools}
        out: list[Finding] = []
        for i, s in enumerate(trace.steps):
            if s.kind is not StepKind.TOOL_CALL:
                continue
            details: dict[str, Any] = {"tool": s.tool_name}
            args: Any = s.tool_args
            if args is None and s.tool_args_raw is not None and s.tool_args_raw.strip():
                try:
                    args = json.loads(s.tool_args_raw)
                except RecursionError:
                    continue  # nesting too deep to read here: leave the call alone (no schema check either)
                except ValueError as exc:
                    details |= {"reason": "invalid_json", "error": str(exc)}
                    evidence = f"arguments are not valid JSON ({exc}): {excerpt(s.tool_args_raw, 120)}"
                    out.append(make_finding(self, trace, i, FailureKind.MALFORMED_CALL, 0.95, evidence, details))
                    continue
                if not isinstance(args, dict):
                    details["reason"] = "not_an_object"
                    evidence = f"arguments are JSON but not an object: {excerpt(s.tool_args_raw, 120)}"
                    out.append(make_finding(self, trace, i, FailureKind.MALFORMED_CALL, 0.9, evidence, details))
                    continue
            if not tools:
                continue
            tool = tools.get(s.tool_name or "")
            if tool is None:
                details["reason"] = "unknown_tool"
                details["known_tools"] = sorted(tools)
                evidence = f"tool {s.tool_name!r} is not among the tools the agent was given"
                # a signal only: the definitions may be partial, and a real miss shows up as the
                # call's failed result (tool_error) or, with an allow-list, as disallowed_tool
                out.append(make_finding(self, trace, i, FailureKind.MALFORMED_CALL, 0.4, evidence, details))
                continue
            if tool.parameters:
                problems = schema_problems(args if args is not None else {}, tool.parameters)
                if problems:
                    details |= {"reason": "schema", "problems": problems}
                    evidence = f"arguments break {tool.name}'s schema: " + "; ".join(problems[:3])
                    out.append(make_finding(self, trace, i, FailureKind.MALFORMED_CALL, 0.9, evidence, details))
        return out


class DisallowedToolRule(Rule):
    """A call to a tool outside the request's allow-list (``allowed_tools``; ``None`` = no check).

    Parameters
    ----------
    allowed_tools:
        Tool names the agent may call; stored as given.

    >>> from model.data.builder import make_trace
    >>> t = make_trace("disallowed_tool", seed=0)
    >>> [f.details["tool"] for f in DisallowedToolRule(allowed_tools=["search"]).inspect(t)]
    ['shell']
    """

    name: ClassVar[str] = "disallowed_tool"
    kinds: ClassVar[tuple[FailureKind, ...]] = (FailureKind.DISALLOWED_TOOL,)
    _params: ClassVar[tuple[str, ...]] = ("allowed_tools",)

    def __init__(self, *, allowed_tools: list[str] | None = None) -> None:
        self.allowed_tools = allowed_tools

    def inspect(self, trace: Trace) -> list[Finding]:
        if self.allowed_tools is None:
            return []
        if isinstance(self.allowed_tools, str) or not all(isinstance(t, str) for t in self.allowed_tools):
            raise InputError(
                f"allowed_tools must be a list of tool names; got {self.allowed_tools!r}",
                path="options.allowed_tools",
            )
        allowed = set(self.allowed_tools)
        out: list[Finding] = []
        for i, s in enumerate(trace.steps):
            if s.kind is StepKind.TOOL_CALL and (s.tool_name or "") not in allowed:
                out.append(
                    make_finding(
                        self,
                        trace,
                        i,
                        FailureKind.DISALLOWED_TOOL,
                        0.99,
                        f"tool {s.tool_name!r} is not in the allow-list",
                        {"tool": s.tool_name, "allowed_tools": sorted(allowed)},
                    )
                )
        return out


__all__ = [
    "DisallowedToolRule",
    "MalformedCallRule",
]

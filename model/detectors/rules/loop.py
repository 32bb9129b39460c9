"""``loop``: the same call, with the same result, in a short cycle."""

from __future__ import annotations

import functools
import json
from collections import Counter
from typing import Any, ClassVar

from model.core.errors import InputError
from model.core.findings import Finding
from model.core.graph import ExecutionGraph, safe_dumps
from model.core.kinds import FailureKind
from model.core.schema import Step, StepKind, Trace
from model.detectors.rules.common import Rule, excerpt, make_finding

#: Past this nesting, loop keys compare a marker: deeper structure never decides a loop, and the
#: recursion stays far from Python's limit whatever an importer let through.
_NORM_DEPTH = 32


def _norm_value(v: Any, depth: int = 0) -> Any:
    if isinstance(v, dict | list) and depth >= _NORM_DEPTH:
        return "<deep>"
    if isinstance(v, dict):
        return {str(k).strip().lower(): _norm_value(x, depth + 1) for k, x in v.items()}
    if isinstance(v, list):
        return [_norm_value(x, depth + 1) for x in v]
    if isinstance(v, str):
        return " ".join(v.split()).lower()
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def normalise_args(step: Step) -> str:
    """A call's arguments with key order, whitespace and case normalised away (a string key).

    >>> from model.core.schema import Step
    >>> normalise_args(Step(kind="tool_call", tool_args={"b": 1.0, "A": " Paris  "})) == \\
    ...     normalise_args(Step(kind="tool_call", tool_args={"a": "paris", "b": 1}))
    True
    """
    if step.tool_args is not None:
        return safe_dumps(_norm_value(step.tool_args), sort_keys=True)
    return " ".join((step.tool_args_raw or "").split()).lower()


@functools.lru_cache(maxsize=4096)
def _norm_result(text: str) -> str:
    # cached by text: a session's window reads the same results again at every append
    s = text.strip()
    if s[:1] in ("{", "[") and len(s) < 200_000:
        try:
            return safe_dumps(_norm_value(json.loads(s)), sort_keys=True)
        except (ValueError, RecursionError):
            pass
    return " ".join(s.split()).lower()


def _call_keys(trace: Trace, graph: ExecutionGraph) -> dict[int, tuple[str, str, str]]:
    """Each call that got a result and whose arguments were recorded → (tool, normalised arguments,
    normalised result): what a repeat compares (the rest are never counted)."""
    steps = trace.steps
    keys: dict[int, tuple[str, str, str]] = {}
    for i, s in enumerate(steps):
        r = graph.result_of_call.get(i) if s.kind is StepKind.TOOL_CALL else None
        if r is not None and (s.tool_args is not None or s.tool_args_raw is not None):
            keys[i] = ((s.tool_name or "").strip().lower(), normalise_args(s), _norm_result(steps[r].content))
    return keys


def _one_off_calls(keys: dict[int, tuple[str, str, str]]) -> set[int]:
    """The calls done once in the run (``keys``: :func:`_call_keys`): no other call has the same tool,
    arguments and result (an edit, a setting changed, a new lookup). In a cycle (search A, search B,
    search A …) none is; a call that got no result, or whose arguments went unrecorded, is none either
    (it did nothing one can see: a malformed call the agent then fixed)."""
    counts = Counter(keys.values())
    return {i for i, k in keys.items() if counts[k] == 1}


class LoopRule(Rule):
    """The same tool with the same (normalised) arguments, ``repeats`` times, and nothing changes in
    what comes back.

    Runs are counted per (tool, normalised arguments) and reset when that call's result changes
    (polling that progresses, a retry after an error that then succeeds) or a user message
    arrives (a new turn may legitimately ask again). Calls that got no result, and calls whose
    arguments were not recorded (hidden by the instrumentation), are not counted.
    The finding is on the *result* of the ``repeats``-th call; ``details["repeats"]`` lists every
    call of the run (steps and source indices), including repeats after the ``repeats``-th.

    Results are compared after normalising JSON key order, whitespace and case; a result that
    differs only in a timestamp counts as a change (conservative: fewer false loops).

    A loop is a short cycle: consecutive repeats are at most ``cycle`` calls apart (the same call
    back to back, or a cycle through at most ``cycle`` different calls: search A, search B, search
    A …). A call repeated after more other work in between (a file re-read, a check rerun after
    edits) starts a new run: on real runs that is what successful agents do — the mini-SWE-agent
    runs repeated a command with the same output, 4–47 calls apart, in 26 of 371 resolved runs
    (7 %), and τ-airline's three loops, all on failed runs, repeated 1–2 calls apart.

    A check rerun after each change is a re-check, not a loop: when every repeat came after a call
    done once in the run (an edit, a setting toggled — no other call has its tool, arguments and
    result), and the repeated call did not fail, nothing is reported. Successful real runs did this
    — mini-SWE-agent ran its reproduction script again after each ``sed -i`` edit (4 resolved runs),
    τ² telecom agents ran the speed test again after each fix (2 successful runs) — and on failed
    runs the same shape was as common (1 SWE, 3 τ² runs). A failed call sent again unchanged is a
    loop whatever came between (τ-airline: ``book_reservation`` rejected three times, a new
    thought between each), and so is a run with any repeat that followed nothing new.

    Parameters
    ----------
    repeats:
        How many identical calls with identical results make a loop (at least 2).
    cycle:
        The longest cycle: consecutive repeats at most this many calls apart (at least 1).
    """

    name: ClassVar[str] = "loop"
    kinds: ClassVar[tuple[FailureKind, ...]] = (FailureKind.LOOP,)
    _params: ClassVar[tuple[str, ...]] = ("repeats", "cycle")

    def __init__(self, *, repeats: int = 3, cycle: int = 3) -> None:
        self.repeats = repeats
        self.cycle = cycle

    def inspect(self, trace: Trace) -> list[Finding]:
        if isinstance(self.repeats, bool) or not isinstance(self.repeats, int) or self.repeats < 2:
            raise InputError(
                f"loop.repeats must be an integer >= 2; got {self.repeats!r}", path="options.detectors.loop"
            )
        if isinstance(self.cycle, bool) or not isinstance(self.cycle, int) or self.cycle < 1:
            raise InputError(
                f"loop.cycle must be an integer >= 1; got {self.cycle!r}", path="options.detectors.loop"
            )
        graph = ExecutionGraph.from_trace(trace, data_flow=False)
        steps = trace.steps
        # key → (its result, the run of identical calls, the finding, whether some repeat was idle)
        runs: dict[tuple[str, str], tuple[str, list[tuple[int, int]], Finding | None, bool]] = {}
        last_call: dict[tuple[str, str], int] = {}  # key → its latest call's number among all calls
        keys = _call_keys(trace, graph)  # each call normalised once
        once = _one_off_calls(keys)
        last_new = 0  # the number of the latest one-off call (done once in the run: an edit, a toggle)
        out: list[Finding] = []
        n_calls = 0
        for i, s in enumerate(steps):
            if s.kind is StepKind.USER_INPUT:
                runs.clear()
                continue
            if s.kind is not StepKind.TOOL_CALL:
                continue
            n_calls += 1
            if i in once:
                last_new = n_calls
            if i not in keys:
                continue  # no result, or arguments not recorded (hidden): nothing to compare
            r = graph.result_of_call[i]
            tool, args, result = keys[i]
            key = (tool, args)
            prev = runs.get(key)
            before = last_call.get(key, -(1 << 30))
            near = n_calls - before <= self.cycle
            last_call[key] = n_calls
            if prev is None or prev[0] != result or not near:
                runs[key] = (result, [(i, r)], None, False)
                continue
            # idle: nothing done once since this call's last time (an edit, a setting toggled), or the
            # call failed and is sent again unchanged; a check rerun after each change is a re-check
            idle = prev[3] or last_new < before or r in graph.failures
            run, found = prev[1], prev[2]
            run.append((i, r))
            entries = [
                {
                    "call_step": c,
                    "call_source_index": steps[c].source_index,
                    "result_step": res,
                    "result_source_index": steps[res].source_index,
                }
                for c, res in run
            ]
            if found is None and len(run) >= self.repeats and idle:
                found = make_finding(
                    self,
                    trace,
                    r,
                    FailureKind.LOOP,
                    0.9,
                    f"{s.tool_name} called {len(run)} times with the same arguments "
                    f"and the same result: {excerpt(steps[r].content, 100)}",
                    {"tool": s.tool_name, "arguments": key[1], "count": len(run), "repeats": entries},
                )
                out.append(found)
            elif found is not None:
                found.details["count"] = len(run)
                found.details["repeats"] = entries
            runs[key] = (result, run, found, idle)
        return out


__all__ = [
    "LoopRule",
    "normalise_args",
]

"""Pieces the importers share: a normalised message, the step sink with its size limit, tool
arguments, the final-output rule and small type checks that name the field path.

Private module; the public API is in :mod:`model.importers`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from pydantic import ValidationError

from model.core.coverage import is_placeholder
from model.core.errors import TooLargeError, TraceImportError
from model.core.schema import Step, StepKind, StepStatus

# --------------------------------------------------------------------------------------------
# type checks that say where and what was received


def type_name(value: Any) -> str:
    """The JSON name of a Python value's type, for messages ("got a number")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def fail(path: str, message: str) -> NoReturn:
    raise TraceImportError(message, path=path or None)


def expect_dict(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        fail(path, f"expected an object, got {type_name(value)}")
    return value


def expect_list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        fail(path, f"expected a list, got {type_name(value)}")
    return value


def opt_str(value: Any, path: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    fail(path, f"expected a string or null, got {type_name(value)}")


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def join(path: str, key: str | int) -> str:
    """``join("messages", 3) == "messages[3]"``, ``join("messages[3]", "role") == "messages[3].role"``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if not _NAME.fullmatch(key):
        return f'{path}["{key}"]'
    return f"{path}.{key}" if path else key


# --------------------------------------------------------------------------------------------
# a normalised message (OpenAI chat messages and span messages both become these)


@dataclass
class Call:
    """A tool call requested by the model; ``arguments`` as received (str, dict, None, ...)."""

    name: str
    arguments: Any
    call_id: str | None = None
    path: str = ""


@dataclass
class Msg:
    """One input element's message after role resolution.

    ``role`` is one of system / user / assistant / tool. ``terminal`` marks the output of a code
    executor posted as a chat message (its exit code decides the status).
    """

    role: str
    text: str = ""
    calls: list[Call] = field(default_factory=list)
    tool_call_id: str | None = None
    tool_name: str | None = None
    speaker: str | None = None
    reasoning: str | None = None
    terminal: bool = False
    status: StepStatus | None = None
    error_type: str | None = None
    #: a reasoning item of its own (Responses API): no answer step beside the reasoning
    reasoning_only: bool = False

    def fingerprint(self) -> tuple[Any, ...]:
        """Identity used to recognise history repeated in a later span's input."""
        return (
            self.role,
            self.text,
            tuple((c.call_id, c.name, canonical(c.arguments)) for c in self.calls),
            self.tool_call_id,
        )


def canonical(value: Any) -> str:
    """A JSON string with sorted keys; strings holding JSON are parsed first."""
    if isinstance(value, str):
        text = value
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            return text
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def as_text(value: Any) -> str:
    """A result payload as text: strings as they are, anything else as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


# --------------------------------------------------------------------------------------------
# tool arguments


def parse_tool_args(value: Any, path: str, *, strict_type: bool) -> tuple[dict[str, Any] | None, str | None]:
    """Turn received tool arguments into ``(tool_args, tool_args_raw)``.

    A JSON string holding an object → ``(dict, None)``; a redaction placeholder (``__REDACTED__``)
    → ``(None, None)``, unknown; a string that is not JSON, or JSON that is not an object →
    ``(None, raw)`` (the ``malformed_call`` rule reads that, it is not an
    import error); an object → ``(dict, None)``; missing → ``({}, None)``. Any other type is an
    import error when ``strict_type`` (OpenAI messages: ``arguments`` must be a string), else it
    is kept as malformed raw JSON text.
    """
    if value is None:
        return {}, None
    if isinstance(value, dict):
        return value, None
    if isinstance(value, str):
        if not value.strip():
            return {}, None
        if is_placeholder(value):  # hidden by the instrumentation: unknown, not malformed
            return None, None
        try:
            parsed = json.loads(value)
        except ValueError:
            return None, value
        except RecursionError:
            return None, value
        if isinstance(parsed, dict):
            return parsed, None
        return None, value
    if strict_type:
        fail(path, f"tool arguments must be a JSON string or an object, got {type_name(value)}")
    return None, canonical(value)


# --------------------------------------------------------------------------------------------
# code-executor output (AG2's Computer_terminal, Magentic-One's ComputerTerminal, ...)

_TERMINAL_NAME = re.compile(r"terminal|executor", re.IGNORECASE)
_EXIT_CODE = re.compile(r"exit\s*code\s*[:=]?\s*(-?\d+)", re.IGNORECASE)
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)")


def is_terminal_name(name: str | None) -> bool:
    return bool(name and _TERMINAL_NAME.search(name))


def terminal_status(text: str) -> StepStatus | None:
    """``error`` when executor output shows a non-zero exit code or a traceback, ``timeout`` for
    exit code 124, ``ok`` when it shows exit code 0, ``None`` when it says neither."""
    m = _EXIT_CODE.search(text[:500])
    if m:
        code = int(m.group(1))
        if code == 124:  # what `timeout` returns; AG2's executors use it for "Timeout"
            return StepStatus.TIMEOUT
        return StepStatus.OK if code == 0 and not _TRACEBACK.search(text) else StepStatus.ERROR
    if _TRACEBACK.search(text):
        return StepStatus.ERROR
    return None


# --------------------------------------------------------------------------------------------
# building steps


class StepSink:
    """Collects steps, enforcing ``max_steps`` as they are made (never after the fact)."""

    def __init__(self, max_steps: int | None, *, before: int = 0) -> None:
        self.max_steps = max_steps
        self.before = before  # the run's steps made before these (a live run's earlier exports)
        self.steps: list[Step] = []
        # call id -> tool name, for tool results that only carry the id
        self.call_names: dict[str, str] = {}
        self.calls_seen: set[str] = set()
        self.results_seen: set[str] = set()

    def add(self, path: str, **fields: Any) -> Step:
        if self.max_steps is not None and self.before + len(self.steps) >= self.max_steps:
            raise TooLargeError(
                f"the trace has more than {self.max_steps} steps (the limit); raise max_steps to import it"
            )
        try:
            step = Step(**fields)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise TraceImportError(f"step field {where!r}: {err['msg']}", path=path or None) from exc
        self.steps.append(step)
        return step


def emit_message(msg: Msg, sink: StepSink, *, source_index: int, path: str, **extra: Any) -> list[Step]:
    """Steps for one normalised message, all with ``source_index``; ``extra`` goes on each step."""
    made: list[Step] = []
    common = dict(source_index=source_index, speaker=msg.speaker, **extra)
    if msg.role == "system":
        made.append(sink.add(path, kind=StepKind.SYSTEM, content=msg.text, **common))
    elif msg.role == "user":
        made.append(sink.add(path, kind=StepKind.USER_INPUT, content=msg.text, **common))
    elif msg.role == "tool":
        name = msg.tool_name
        if name is None and msg.tool_call_id is not None:
            name = sink.call_names.get(msg.tool_call_id)
        status = msg.status
        if status is None and msg.terminal:
            status = terminal_status(msg.text)
        if msg.tool_call_id is not None:
            sink.results_seen.add(msg.tool_call_id)
        made.append(
            sink.add(
                path,
                kind=StepKind.TOOL_RESULT,
                content=msg.text,
                tool_name=name,
                call_id=msg.tool_call_id,
                status=status,
                error_type=msg.error_type,
                **common,
            )
        )
    else:  # assistant
        if msg.reasoning:
            made.append(sink.add(path, kind=StepKind.LLM_REASONING, content=msg.reasoning, **common))
        if msg.text or not (msg.calls or msg.reasoning_only):
            made.append(
                sink.add(
                    path,
                    kind=StepKind.LLM_OUTPUT,
                    content=msg.text,
                    status=msg.status,
                    error_type=msg.error_type,
                    **common,
                )
            )
        for call in msg.calls:
            args, raw = parse_tool_args(call.arguments, call.path, strict_type=True)
            if call.call_id is not None:
                sink.call_names[call.call_id] = call.name
                sink.calls_seen.add(call.call_id)
            made.append(
                sink.add(
                    path,
                    kind=StepKind.TOOL_CALL,
                    content=raw if raw is not None else as_text(call.arguments),
                    tool_name=call.name,
                    tool_args=args,
                    tool_args_raw=raw,
                    call_id=call.call_id,
                    **common,
                )
            )
    return made


_FINAL_BLOCKERS = {StepKind.TOOL_CALL, StepKind.TOOL_RESULT, StepKind.USER_INPUT, StepKind.ERROR}


def mark_final_output(steps: list[Step]) -> None:
    """The final-output rule, shared by every importer except native (which says it itself).

    The last ``llm_output`` step becomes ``final_output`` when no ``tool_call``, ``tool_result``,
    ``user_input`` or ``error`` step follows it. A run that ends on a tool result, a user turn or a
    failed LLM call therefore has no final output (the ``incomplete`` rule reads that).
    """
    for i in range(len(steps) - 1, -1, -1):
        kind = steps[i].kind
        if kind in _FINAL_BLOCKERS:
            return
        if kind == StepKind.LLM_OUTPUT:
            steps[i].kind = StepKind.FINAL_OUTPUT
            return


# --------------------------------------------------------------------------------------------
# time


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ns_to_datetime(ns: int) -> datetime:
    return _EPOCH + timedelta(microseconds=ns // 1000)


def to_ns(value: Any, path: str) -> int | None:
    """Nanoseconds since the epoch from OTLP strings/ints, ISO 8601 text or epoch numbers."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        fail(path, f"expected a time, got {type_name(value)}")
    if isinstance(value, int | float):
        return _scale_epoch(float(value))
    if isinstance(value, str):
        s = value.strip()
        if re.fullmatch(r"-?\d+(\.\d+)?", s):
            return _scale_epoch(float(s)) if "." in s else _scale_epoch_int(int(s))
        try:
            dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
        except ValueError:
            fail(path, f"expected a time (epoch nanoseconds or ISO 8601), got {value!r}")
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        delta = dt - _EPOCH  # integer arithmetic: float seconds would lose the nanoseconds
        return (delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * 1000
    fail(path, f"expected a time, got {type_name(value)}")


def _scale_epoch_int(v: int) -> int:
    # magnitude tells the unit: seconds ~1e9, ms ~1e12, us ~1e15, ns ~1e18
    if abs(v) < 10**11:
        return v * 10**9
    if abs(v) < 10**14:
        return v * 10**6
    if abs(v) < 10**17:
        return v * 10**3
    return v


def _scale_epoch(v: float) -> int:
    if abs(v) < 1e11:
        return int(v * 1e9)
    if abs(v) < 1e14:
        return int(v * 1e6)
    if abs(v) < 1e17:
        return int(v * 1e3)
    return int(v)


"""The span record both span conventions read, and the builder that turns spans into steps.

The builder keeps what a trace's spans have already said, so that chat spans repeating the
conversation in their input add only what is new (docs/architecture.md, "Indexing"): an input message
is skipped when an identical message (same role, text, tool calls and call id) was already
imported from an earlier span and not yet "used up" by another repeat (a multiset, so a user
who really says "yes" twice keeps both); a tool result whose call id already has a result and a
tool call whose call id was already imported are skipped too.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from model.core.schema import Step, StepKind, StepStatus, ToolDefinition
from model.importers._common import Msg, StepSink, as_text, emit_message, ns_to_datetime, parse_tool_args

_TIMEOUT = re.compile(r"time[ _-]?out|deadline[ _-]?exceeded", re.IGNORECASE)


@dataclass
class Span:
    """One span after normalisation: flat attributes with plain Python values."""

    trace_id: str
    span_id: str | None
    parent_id: str | None
    name: str
    start_ns: int | None
    end_ns: int | None
    attrs: dict[str, Any]
    error: bool = False
    status_message: str | None = None
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    path: str = ""
    resource: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The span as a listed span (what :func:`model.importers.spans.collect_spans` reads back)."""
        out: dict[str, Any] = {
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "parent_span_id": self.parent_id,
            "name": self.name,
            "start_time_unix_nano": self.start_ns,
            "end_time_unix_nano": self.end_ns,
            "attributes": self.attrs,
            "status": {"code": "ERROR" if self.error else "UNSET", "message": self.status_message},
            "events": [{"name": n, "attributes": a} for n, a in self.events],
        }
        if self.resource:
            out["resource"] = {"attributes": self.resource}
        return {k: v for k, v in out.items() if v is not None}

    def attr_path(self, key: str) -> str:
        return f'{self.path}.attributes["{key}"]'

    @property
    def latency_ms(self) -> float | None:
        if self.start_ns is None or self.end_ns is None or self.end_ns < self.start_ns:
            return None
        return (self.end_ns - self.start_ns) / 1e6

    def exception(self) -> tuple[str | None, str | None]:
        """``(exception.type, exception.message)`` from the span's first exception event."""
        for name, attrs in self.events:
            if name == "exception" or "exception.type" in attrs or "exception.message" in attrs:
                etype, emsg = attrs.get("exception.type"), attrs.get("exception.message")
                return (str(etype) if etype is not None else None, str(emsg) if emsg is not None else None)
        return None, None

    def failure(self) -> tuple[StepStatus | None, str | None, str]:
        """``(status, error_type, message)``: status is ERROR/TIMEOUT when the span failed, else None."""
        etype_attr = self.attrs.get("error.type")
        exc_type, exc_msg = self.exception()
        if not (self.error or etype_attr is not None or exc_type is not None):
            return None, None, ""
        error_type = str(etype_attr) if etype_attr is not None else exc_type
        message = self.status_message or exc_msg or error_type or "the span ended with an error status"
        text = f"{error_type or ''} {message}"
        status = StepStatus.TIMEOUT if _TIMEOUT.search(text) else StepStatus.ERROR
        return status, error_type, message


def _same(fingerprint: tuple[Any, ...]) -> Any:
    return fingerprint


#: What skipping a message again needs: its fingerprint (as kept), the call id of a tool result,
#: the call ids of an assistant message that is only calls (all with ids).
Record = tuple[Any, "str | None", "tuple[str, ...] | None"]


def _record(msg: Msg, fp: Any) -> Record:
    result_id = msg.tool_call_id if msg.role == "tool" else None
    calls = None
    if msg.role == "assistant" and msg.calls and not msg.text and all(c.call_id is not None for c in msg.calls):
        calls = tuple(str(c.call_id) for c in msg.calls)
    return (fp, result_id, calls)


_NONE: Record = (None, None, None)


@dataclass
class Conversation:
    """A chat input's message list, not read yet (``read(messages, first index)`` reads it); its
    first ``repeat`` messages are the last input's, whose records are ``records``
    (:meth:`SpanBuilder.repeated`)."""

    messages: list[Any]
    repeat: int
    records: list[Record]
    read: Callable[[list[Any], int], list[Msg]]


@dataclass
class SpanBuilder:
    """Collects the steps of one trace while its spans are visited in order.

    A run read export by export (:mod:`model.importers.live`) gives the builder what the earlier
    exports left: ``key`` (how a message fingerprint is remembered: a short digest there),
    ``_seen``, ``_pending`` and ``_earlier`` (tool calls without an id that earlier exports
    made and no later input has given an id yet, by tool name); its ``sink`` then holds only the
    new spans' steps.
    """

    sink: StepSink
    tools: dict[str, ToolDefinition] = field(default_factory=dict)
    key: Callable[[tuple[Any, ...]], Any] = _same
    _seen: Counter[Any] = field(default_factory=Counter)
    # tool calls made by an LLM span and not yet answered, by tool name (for tool spans without ids)
    _pending: dict[str, list[str | None]] = field(default_factory=dict)
    _earlier: Counter[str] = field(default_factory=Counter)
    #: remember the last chat input's messages (a live run: each chat span repeats the conversation)
    remember: bool = False
    _last: tuple[list[Any], list[Record]] | None = None

    def _common(self, span: Span, source_index: int) -> dict[str, Any]:
        return {
            "source_index": source_index,
            "span_id": span.span_id,
            "timestamp": ns_to_datetime(span.start_ns) if span.start_ns is not None else None,
        }

    def inputs(
        self, span: Span, source_index: int, msgs: list[Msg], path: str, *,
        conversation: Conversation | None = None,
    ) -> None:
        """Import the messages of an LLM span's input that were not imported before: ``msgs``,
        then ``conversation``'s (a builder that remembers inputs: the input's message list, read
        here; those the last input held too are skipped unread when each would be skipped anyway)."""
        # each message seen before this span can stand for one repeat: what _seen held when the
        # span began, less the repeats it already stood for (counted, not copied: the run is long)
        used: Counter[Any] = Counter()
        added: Counter[Any] = Counter()
        for msg in msgs:
            self._input(msg, span, source_index, path, used, added)
        if conversation is None:
            return
        c = conversation
        if c.records and self._skips(c.records, used, added):
            records, tail = list(c.records), c.read(c.messages[c.repeat:], c.repeat)
        else:  # one of them would be imported now: read them all, as usual
            records, tail = [], c.read(c.messages, 0)
        records += [self._input(msg, span, source_index, path, used, added) for msg in tail]
        self._last = (c.messages, records)

    def repeated(self, messages: Any) -> tuple[int, list[Record]]:
        """How many messages ``messages`` (an input's message list) starts with that the last input
        read held (all of its), and their records; ``(0, [])`` when it does not start so, or when the
        builder does not remember inputs."""
        if not self.remember or self._last is None or not isinstance(messages, list):
            return 0, []
        last, records = self._last
        if last and messages[: len(last)] == last:
            return len(last), records
        return 0, []

    def _input(self, msg: Msg, span: Span, source_index: int, path: str, used: Counter[Any],
               added: Counter[Any]) -> Record:
        fp = self.key(msg.fingerprint())
        record = _record(msg, fp) if self.remember else _NONE
        if self._seen[fp] - added[fp] - used[fp] > 0:
            used[fp] += 1
            return record
        if msg.role == "tool" and msg.tool_call_id is not None and msg.tool_call_id in self.sink.results_seen:
            return record
        if msg.role == "assistant" and msg.calls:
            self._backfill_ids(msg)
        if msg.role == "assistant" and msg.calls and not msg.text and all(
            c.call_id is not None and c.call_id in self.sink.calls_seen for c in msg.calls
        ):
            return record
        self._seen[fp] += 1
        added[fp] += 1
        self._emit(msg, span, source_index, path, {})
        return record

    def _skips(self, records: list[Record], used: Counter[Any], added: Counter[Any]) -> bool:
        """Whether :meth:`_input` would skip every message these records stand for (``used``
        updated then); a tool result or a call whose id is known is skipped whatever its count."""
        mine: Counter[Any] = Counter()
        for fp, result_id, call_ids in records:
            if self._seen[fp] - added[fp] - used[fp] - mine[fp] > 0:
                mine[fp] += 1
            elif result_id is not None and result_id in self.sink.results_seen:
                continue
            elif call_ids is None or not all(c in self.sink.calls_seen for c in call_ids):
                return False
        used.update(mine)
        return True

    def _backfill_ids(self, msg: Msg) -> None:
        """A call repeated in a later input with its id, made earlier without one (LiteLLM's
        output attributes carry no call id): the earlier step gets the id, so the repeat is
        recognised and the result links to it."""
        for call in msg.calls:
            if call.call_id is None or call.call_id in self.sink.calls_seen:
                continue
            pending = self._pending.get(call.name, [])
            if None not in pending:
                continue
            if self._earlier[call.name] > 0:  # the first such call is an earlier export's (its step is stored)
                self._earlier[call.name] -= 1
            else:
                step = next((s for s in self.sink.steps if s.kind == StepKind.TOOL_CALL
                             and s.tool_name == call.name and s.call_id is None), None)
                if step is None:
                    continue
                step.call_id = call.call_id
            pending[pending.index(None)] = call.call_id
            self.sink.calls_seen.add(call.call_id)
            self.sink.call_names[call.call_id] = call.name

    def outputs(
        self, span: Span, source_index: int, msgs: list[Msg], path: str, llm: dict[str, Any]
    ) -> list[Step]:
        """Import an LLM span's output; usage and latency go on its first step only."""
        made: list[Step] = []
        for msg in msgs:
            self._seen[self.key(msg.fingerprint())] += 1
            made.extend(self._emit(msg, span, source_index, path, llm))
        if made:
            first = made[0]
            first.tokens_in = llm.get("tokens_in")
            first.tokens_out = llm.get("tokens_out")
            first.latency_ms = span.latency_ms
        return made

    def _emit(self, msg: Msg, span: Span, source_index: int, path: str, llm: dict[str, Any]) -> list[Step]:
        extra = self._common(span, source_index)
        if msg.role == "assistant":
            extra.update(model=llm.get("model"), temperature=llm.get("temperature"))
            if llm.get("metadata"):
                extra["metadata"] = dict(llm["metadata"])
        made = emit_message(msg, self.sink, source_index=extra.pop("source_index"), path=path, **extra)
        for step in made:
            if step.kind == StepKind.TOOL_CALL and step.tool_name is not None:
                self._pending.setdefault(step.tool_name, []).append(step.call_id)
            if step.kind == StepKind.TOOL_RESULT:
                self._answer(step.tool_name, step.call_id)
        return made

    def _answer(self, name: str | None, call_id: str | None) -> str | None:
        """Mark a pending call answered; returns the call id it matched."""
        if name is None:
            return call_id
        pending = self._pending.get(name, [])
        if call_id is not None and call_id in pending:
            pending.remove(call_id)
            return call_id
        if call_id is None and pending:
            return pending.pop(0)
        if call_id is not None and None in pending:
            pending.remove(None)
        return call_id

    def error(self, span: Span, source_index: int, path: str, llm: dict[str, Any], speaker: str | None) -> Step:
        """A failed LLM call with no output → one ``error`` step."""
        status, error_type, message = span.failure()
        return self.sink.add(
            path,
            kind=StepKind.ERROR,
            content=message,
            status=status or StepStatus.ERROR,
            error_type=error_type,
            speaker=speaker,
            model=llm.get("model"),
            temperature=llm.get("temperature"),
            tokens_in=llm.get("tokens_in"),
            tokens_out=llm.get("tokens_out"),
            latency_ms=span.latency_ms,
            metadata=dict(llm.get("metadata") or {}),
            **self._common(span, source_index),
        )

    def tool(
        self,
        span: Span,
        source_index: int,
        path: str,
        *,
        name: str,
        call_id: str | None,
        arguments: Any,
        arguments_given: bool,
        result: Any,
        speaker: str | None,
        result_recorded: bool = True,
        failed: bool = False,
    ) -> None:
        """A tool execution span → ``tool_call`` (unless an LLM span already made it) + ``tool_result``.

        ``result_recorded=False``: the span carries no result attribute (content capture off), so
        an empty result is unknown, not empty (``metadata["content_recorded"] = False``);
        ``failed``: the result itself says the tool failed (status ``error``).
        """
        common = self._common(span, source_index)
        pending = self._pending.get(name, [])
        # the call was made by an LLM span with this id, or by one that gave the call no id
        already = (call_id in self.sink.calls_seen or None in pending) if call_id is not None else bool(pending)
        if already:
            call_id = self._answer(name, call_id)
        else:
            # arguments not on the span (content capture off): unknown, not "no arguments"
            args, raw = (parse_tool_args(arguments, span.attr_path("arguments"), strict_type=False)
                         if arguments_given else (None, None))
            self.sink.add(
                path,
                kind=StepKind.TOOL_CALL,
                content=raw if raw is not None else (as_text(arguments) if arguments_given else ""),
                tool_name=name,
                tool_args=args,
                tool_args_raw=raw,
                call_id=call_id,
                speaker=speaker,
                **common,
            )
            if call_id is not None:
                self.sink.calls_seen.add(call_id)
                self.sink.call_names[call_id] = name
        status, error_type, message = span.failure()
        if failed and status is None:  # the tool's own output says it failed (LangChain's status)
            status = StepStatus.ERROR
        text = as_text(result)
        if not text and status is not None:
            text = message
        if call_id is not None:
            self.sink.results_seen.add(call_id)
        self.sink.add(
            path,
            kind=StepKind.TOOL_RESULT,
            content=text,
            tool_name=name,
            call_id=call_id,
            status=status or StepStatus.OK,
            error_type=error_type,
            latency_ms=span.latency_ms,
            metadata={} if result_recorded or text else {"content_recorded": False},
            **common,
        )


def indexed_rows(
    attrs: dict[str, Any], pattern: re.Pattern[str], which: str
) -> list[tuple[int, dict[str, Any]]]:
    r"""Group flattened message attributes (``<prefix>.<which>.<i>.<field>``) into ``(i, fields)``
    per message, in index order. ``pattern`` captures (which, index, field).

    >>> indexed_rows({"p.in.1.role": "user", "p.in.0.role": "system", "p.out.0.role": "x"},
    ...              re.compile(r"p\.(in|out)\.(\d+)\.(.+)"), "in")
    [(0, {'role': 'system'}), (1, {'role': 'user'})]
    """
    rows: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        m = pattern.fullmatch(key)
        if m and m.group(1) == which:
            rows.setdefault(int(m.group(2)), {})[m.group(3)] = value
    return [(i, rows[i]) for i in sorted(rows)]


__all__ = ["Span", "SpanBuilder", "indexed_rows"]

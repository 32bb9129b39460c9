"""A run's spans as they arrive, export by export (the OTLP receiver's live sessions): each export
costs only its own spans.

:class:`LiveSpans` keeps what the span importer (:mod:`model.importers.spans`) needs to go on
reading a run, as a JSON dict (a session stores it, so any worker continues it), and never the
spans themselves:

- the span tree's links: parent and agent name of each span id that has either (a span with
  neither ends every walk up the tree as a missing one would), and the parent ids seen;
- where the run's root agent was found: the first span (in arrival order) with an agent span above
  it or on it, and the missing parents below which earlier spans still wait for one;
- the conversation already imported (a multiset of message fingerprints, as 16-hex digests) and
  the tool calls made, answered and still pending, so that chat spans repeating the conversation
  add only what is new.

A chat span repeats the whole conversation in its input: the caller may keep :attr:`LiveSpans.last`
(the last input's messages and a record of each: fingerprint, call ids) in memory and hand it to
the next export, whose chat input then reads only the messages past those (the repeat is compared,
not read, and each repeated message is skipped as it would be when read).

The steps an export adds are those that importing every span of the run so far (in arrival order)
adds after the steps of the earlier spans: the same speakers (the agent each span runs under), the
same root agent, a span with children being no leaf, messages repeated from earlier spans skipped,
the last ``llm_output`` of the export marked ``final_output`` when nothing follows it.
``source_index`` is ``base`` plus the span's position in arrival order. ``tests/test_live_spans.py``
checks it against that whole re-import on recorded runs of every instrumentation, one span per export
and in batches.

Where the whole re-import would read an earlier span differently once later spans arrived (a leaf
that later gets a child; an id-less tool call given its id by a later input; a span id sent twice),
the steps already made stay as they were: the re-import's count of earlier steps no longer matches
and it loses steps, this keeps them.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

from model.core.schema import Step, StepKind
from model.importers import genai, openinference
from model.importers._common import StepSink, mark_final_output
from model.importers._spanbase import Span, SpanBuilder
from model.importers.spans import listed_spans

#: What :meth:`LiveSpans.state` writes; an older session (its spans kept whole) is read again once.
VERSION = 2


def _digest(fingerprint: tuple[Any, ...]) -> str:
    return hashlib.blake2b(repr(fingerprint).encode(), digest_size=8).hexdigest()


def _own_agent(span: Span) -> str | None:
    if openinference.agent_name(span):
        return openinference.agent_name(span)
    if genai.operation(span) in genai.AGENT_OPERATIONS:
        return genai.agent_name(span)
    return None


class LiveSpans:
    """One run's import, continued export by export (see the module's text).

    ``state``: what :meth:`state` returned after the previous export (``None``: a new run, whose
    first span gets ``source_index`` ``base``). A state of a session that kept its spans whole
    (``{"spans", "steps", "base"}``) is read again once, its spans' steps left out. ``last``: what
    :attr:`last` said after an earlier export of the run, if the caller kept it (any earlier
    export's will do: it stands for the messages it holds, whatever came after).
    """

    def __init__(self, state: dict[str, Any] | None = None, *, base: int = 0, last: Any = None) -> None:
        s = state or {}
        self.base = int(s.get("base", base))
        self.spans = 0  # spans read so far
        self.steps = 0  # steps made so far
        self.trace_id: str | None = None  # the run's first trace id
        self.root_agent: str | None = None
        self._tree: dict[str, list[str | None]] = {}  # span id -> [parent id, own agent name]
        self._parents: dict[str, None] = {}  # parent ids seen (an ordered set)
        self._waiting: dict[str, int] = {}  # missing parent -> first span below it with no agent yet
        self._root: list[Any] | None = None  # [position, missing parent above it or None]
        self._builder = SpanBuilder(StepSink(None), key=_digest, remember=True)
        self._builder._last = last
        if "spans" in s and "v" not in s:  # the old shape: read its spans again, keep no step
            self.add(s["spans"], max_steps=None)
            return
        if not s:
            return
        b = self._builder
        self.spans, self.steps, self.trace_id = int(s["n"]), int(s["steps"]), s.get("trace")
        self.root_agent = s.get("root_agent")
        self._tree = dict(s.get("tree") or {})
        self._parents = dict.fromkeys(s.get("parents") or [])
        self._waiting = dict(s.get("waiting") or {})
        self._root = s.get("root")
        b._seen = Counter(s.get("seen") or {})
        b._pending = {k: list(v) for k, v in (s.get("pending") or {}).items()}
        b._earlier = Counter(s.get("earlier") or {})
        b.sink.call_names = dict(s.get("calls") or {})
        b.sink.calls_seen = set(b.sink.call_names)
        b.sink.results_seen = set(s.get("results") or [])

    def state(self) -> dict[str, Any]:
        """What the next export needs (JSON)."""
        b = self._builder
        return {
            "v": VERSION,
            "base": self.base,
            "n": self.spans,
            "steps": self.steps,
            "trace": self.trace_id,
            "root_agent": self.root_agent,
            "tree": self._tree,
            "parents": list(self._parents),
            "waiting": self._waiting,
            "root": self._root,
            "seen": dict(b._seen),
            "pending": {k: v for k, v in b._pending.items() if v},
            "earlier": {k: v for k, v in b._earlier.items() if v},
            "calls": b.sink.call_names,
            "results": sorted(b.sink.results_seen),
        }

    @property
    def last(self) -> Any:
        """The last chat input read and its messages' records, for the next export's ``last``
        (the worker keeps it: a chat input whose messages start with it reads only the rest)."""
        return self._builder._last

    @property
    def next_source_index(self) -> int:
        return self.base + self.spans

    def add(self, raw: list[Any], *, max_steps: int | None) -> list[Step]:
        """Read the export's spans (listed span objects, in arrival order; as
        :meth:`model.importers._spanbase.Span.to_json` writes them); the steps they add.

        ``max_steps``: the run's limit on steps (:class:`~model.core.errors.TooLargeError` past it).
        """
        first = self.spans
        spans = listed_spans(raw, first=first)
        if not spans:
            return []
        if self.trace_id is None:
            self.trace_id = spans[0].trace_id
        for sp in spans:  # the whole export is in the tree before any span is read
            if sp.parent_id is not None:
                self._parents[sp.parent_id] = None
            if sp.span_id is not None:
                own = _own_agent(sp)
                if sp.parent_id is not None or own is not None:
                    self._tree[sp.span_id] = [sp.parent_id, own]
                else:
                    self._tree.pop(sp.span_id, None)
        self._find_root(spans, first)
        b = self._builder
        kept, b.sink = b.sink, StepSink(max_steps, before=self.steps)  # it holds only the new steps
        b.sink.call_names, b.sink.calls_seen, b.sink.results_seen = kept.call_names, kept.calls_seen, kept.results_seen
        for i, sp in enumerate(spans):
            start = len(b.sink.steps)
            speaker = self._walk(sp.parent_id, _own_agent(sp), {sp.span_id})[0]
            is_leaf = sp.span_id is None or sp.span_id not in self._parents
            if openinference.KIND in sp.attrs:
                openinference.handle(sp, first + i, b, speaker, is_leaf)
            elif genai.is_genai(sp):
                genai.handle(sp, first + i, b, speaker, is_leaf)
            for st in b.sink.steps[start:]:
                st.source_index += self.base
                # the span's own trace id, for gen_ai.evaluation.result events parented to it
                st.metadata["otel.trace_id"] = sp.trace_id if sp.span_id is not None else self.trace_id
        new = b.sink.steps
        mark_final_output(new)
        for st in new:
            if st.kind == StepKind.TOOL_CALL and st.call_id is None and st.tool_name is not None:
                b._earlier[st.tool_name] += 1
        self.spans += len(spans)
        self.steps += len(new)
        return new

    # -- the tree ----------------------------------------------------------------------------
    def _walk(
        self, parent: str | None, own: str | None, seen: set[str | None]
    ) -> tuple[str | None, str | None, str | None]:
        """Up the tree from a span (its parent, its own agent): ``(nearest agent, outermost agent,
        the missing parent where the walk stopped or None)``."""
        near = outer = own
        while parent is not None and parent not in seen:
            seen.add(parent)
            link = self._tree.get(parent)
            if link is None:
                return near, outer, parent
            parent, name = link
            if name:
                near = near or name
                outer = name
        return near, outer, None

    def _find_root(self, spans: list[Span], first: int) -> None:
        """The run's root agent: the outermost agent above the first span that has one above it
        (or is one); spans still waiting for a missing parent may become that first span."""
        arrived = {sp.span_id: sp for sp in spans if sp.span_id is not None}
        found: list[tuple[int, str, str | None]] = []  # (position, outermost agent, missing above)
        for sid in [sid for sid in self._waiting if sid in arrived]:
            pos = self._waiting.pop(sid)
            sp = arrived[sid]
            _, outer, missing = self._walk(sp.parent_id, _own_agent(sp), {sid})
            if outer:
                found.append((pos, outer, missing))
            elif missing is not None:
                self._waiting[missing] = min(pos, self._waiting.get(missing, pos))
        if self._root is not None and self._root[1] in arrived:  # the root span's chain grew
            sp = arrived[self._root[1]]
            _, outer, missing = self._walk(sp.parent_id, _own_agent(sp), {sp.span_id})
            self.root_agent = outer or self.root_agent
            self._root[1] = missing
        for i, sp in enumerate(spans):
            if self._root is not None or found:
                break  # later spans than a found one cannot come first
            _, outer, missing = self._walk(sp.parent_id, _own_agent(sp), {sp.span_id})
            if outer:
                found.append((first + i, outer, missing))
            elif missing is not None:
                self._waiting[missing] = min(first + i, self._waiting.get(missing, first + i))
        if found:
            pos, outer, missing = min(found, key=lambda f: f[0])
            if self._root is None or pos < self._root[0]:
                self._root = [pos, missing]
                self.root_agent = outer
        if self._root is not None:  # only spans before the root span can still come first
            self._waiting = {k: v for k, v in self._waiting.items() if v < self._root[0]}


__all__ = ["VERSION", "LiveSpans"]

"""The generator's intermediate form: a :class:`Scenario` is a healthy run as a list of :class:`Beat`.

A task family writes a healthy scenario (goal, tool calls with realistic payloads, the answer);
failure recipes (:mod:`model.data.datagen.inject`) edit the beats and mark the ones that fail; the
renderer turns beats into a :class:`model.core.schema.Trace` through :class:`model.data.tracebuilder.TraceBuilder`,
which owns the bookkeeping of step indices, ``source_index`` and call ids.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from model.data.datagen.lexicon import Lexicon

# Beat kinds: system, user, think (llm_reasoning), say (llm_output), call (tool_call),
# result (tool_result), final (final_output), error (provider error).


@dataclass
class Beat:
    kind: str
    text: str = ""
    tool: str | None = None
    args: dict[str, Any] | None = None
    raw_args: str | None = None
    payload: Any = None
    status: str | None = None
    error_type: str | None = None
    speaker: str | None = None
    latency_ms: float | None = None
    model: str | None = None
    #: True when this beat belongs to the previous beat's message (text + tool calls of one
    #: assistant message share a ``source_index``).
    joined: bool = False
    #: failure kinds that happen at this beat (filled by the recipes)
    fails: list[str] = field(default_factory=list)
    #: for a result: the position of its call among the scenario's calls; for a call: its own
    call_no: int | None = None
    #: a result the answer relies on, and what the tool says when it finds nothing
    key: bool = False
    empty_payload: Any = None
    meta: dict[str, Any] = field(default_factory=dict)

    def clone(self, **changes: Any) -> Beat:
        b = Beat(**{**self.__dict__, "fails": [], "meta": dict(self.meta)})
        for k, v in changes.items():
            setattr(b, k, v)
        return b


@dataclass
class Constraint:
    """A requirement stated in the goal; ``violating_final`` ignores it (context loss)."""

    text: str
    violating_final: str
    #: optional: a call whose arguments break the constraint (call number, new args)
    violating_call: tuple[int, dict[str, Any]] | None = None


@dataclass
class Scenario:
    family: str
    task: str
    lang: str
    template: str
    lx: Lexicon
    rng: random.Random
    system: str = ""
    goal: str = ""
    beats: list[Beat] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    final_ok: str = ""
    final_empty: str = ""
    final_fail: str = ""
    #: a plausible, fluent answer that states facts the run never obtained (used when the
    #: key result came back empty)
    final_invented: str = ""
    constraint: Constraint | None = None
    speakers: dict[str, str] = field(default_factory=dict)
    agent: str | None = None
    n_calls: int = 0
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def zh(self) -> bool:
        return self.lang == "zh"

    def t(self, en: str | list[str], zh: str | list[str]) -> str:
        """Pick the language's text (one of several paraphrases when given a list)."""
        opt = zh if self.zh else en
        return self.rng.choice(opt) if isinstance(opt, list) else opt

    def call(
        self,
        tool: str,
        args: dict[str, Any],
        payload: Any,
        *,
        thought: str | None = None,
        empty: Any = None,
        key: bool = False,
        latency: tuple[float, float] = (80.0, 900.0),
        speaker: str | None = None,
        note: str | None = None,
    ) -> int:
        """Append (thought) + call + result; returns the call number."""
        no = self.n_calls
        self.n_calls += 1
        who = speaker or self.agent
        if thought:
            self.beats.append(Beat("say", thought, speaker=who))
        self.beats.append(
            Beat("call", tool=tool, args=args, call_no=no, speaker=who, joined=bool(thought))
        )
        self.beats.append(
            Beat(
                "result",
                payload=payload,
                tool=tool,
                status="ok",
                call_no=no,
                key=key,
                empty_payload=empty,
                latency_ms=round(self.rng.uniform(*latency), 1),
                speaker=tool,
            )
        )
        if note:
            self.beats.append(Beat("think", note, speaker=who))
        return no

    def think(self, text: str, speaker: str | None = None) -> None:
        self.beats.append(Beat("think", text, speaker=speaker or self.agent))

    def say(self, text: str, speaker: str | None = None) -> None:
        self.beats.append(Beat("say", text, speaker=speaker or self.agent))

    def tool(self, name: str, description: str, props: dict[str, str], required: list[str]) -> None:
        """Declare a tool (JSON Schema with simple property types)."""
        self.tools.append(
            {
                "name": name,
                "description": description,
                "parameters": {
                    "type": "object",
                    "properties": {k: {"type": v} for k, v in props.items()},
                    "required": required,
                },
            }
        )

    def calls(self) -> list[Beat]:
        return [b for b in self.beats if b.kind == "call"]

    def results(self) -> list[Beat]:
        return [b for b in self.beats if b.kind == "result"]

    # ---- what the recipes look up and edit
    def index_of(self, b: Beat) -> int:
        """Position of beat ``b`` (by identity)."""
        return next(i for i, x in enumerate(self.beats) if x is b)

    def pair(self, call_no: int) -> tuple[int, int]:
        """Positions of call ``call_no`` and its result."""
        ci = next(i for i, b in enumerate(self.beats) if b.kind == "call" and b.call_no == call_no)
        ri = next(i for i, b in enumerate(self.beats) if b.kind == "result" and b.call_no == call_no)
        return ci, ri

    def final_beat(self) -> Beat:
        return next(b for b in reversed(self.beats) if b.kind == "final")

    def key_result(self) -> Beat | None:
        """The first key result that has an empty variant (what hallucination recipes empty)."""
        ks = [b for b in self.beats if b.kind == "result" and b.key and b.empty_payload is not None]
        return ks[0] if ks else None

    def new_call_no(self) -> int:
        self.n_calls += 1
        return self.n_calls - 1

    def truncate_after(self, ri: int) -> None:
        """Drop the beats after ``ri`` (calls that depended on a failed one), keeping the final."""
        fin = self.final_beat()
        self.beats = self.beats[: ri + 1] + [fin]


def dump(payload: Any) -> str:
    """Tool payloads are shown as the agent saw them: JSON text for structures."""
    if isinstance(payload, str):
        return payload
    return json.dumps(payload, ensure_ascii=False)

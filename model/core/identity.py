"""Which agent a run belongs to when the caller names none: a run's signature and agent profiles.

A tenant's unnamed runs are told apart by what they show of their agent, never of their task:

========== ===================================================================== ==========
channel    features (32-bit hashes; what a run shows)                            weight
========== ===================================================================== ==========
system     word trigrams of the system / developer messages (the instructions;   2
           one in three, chosen by hash)
opening    word trigrams of the opening: every message up to and including the   2
           first user message (else the first message), head and tail
shape      how the run is laid out: the kinds of its first three steps, one or   2.5
           more user turns, whether it reasons, how it writes its calls (JSON,
           ``verb[arg]`` and which verbs, text)
args       each tool call's argument names (``search(query)``)                    1
tools      the tools it calls or is offered                                      1.5
model      the model names, and their family (a fine-tune of ``gpt-4.1`` is      2
           ``gpt-4.1``'s family)
ops        the GenAI operation and provider of its LLM calls (spans only)        0.5
service    the span resource's ``service.name``                                  2
========== ===================================================================== ==========

The fixed part of a template is only known after a few runs, so an :class:`AgentProfile` keeps
how many of its runs showed each feature, and a feature weighs ``(count / runs) ** 2``: the
template (seen in every run) dominates, the task text inside it (seen once) fades out, and a
first run weighs everything alike. A channel's similarity is that weighted share of the profile
found in the run; ``system`` also asks how much of the run's instructions the profile knows, and is
sharpened (a rewritten prompt that shares half its trigrams counts 0, an edit that keeps most 0.4
to 1); ``tools`` and ``model`` average the profile's share found with the share of the run's own
tools the profile knows (an unseen tool forgiven while the profile has few runs). Each channel is
weighted by its weight times its evidence: a template of a few trigrams, or an opening learned
from one run, says little when it does not match; a matching model says less than a different one
(many agents share a model); a run lacking a channel the profile has (or the other way round)
says little for tools. Channels a run cannot show are left out, so a run with its content capture
off (only tools, model, ``service.name``) is compared on those alone: text channels count only
when the run recorded its content, ``model``, ``ops`` and ``service`` only when both sides carry
them. Tools alone never make a match where the run or the agent shows what names an agent
(:data:`IDENTITY_CHANNELS`) and none of it can be compared: a chat log naming no model and spans with
content capture off share only tool names, which every agent of one environment shares; the SDKs'
default ``service.name`` (``unknown_service…``) names no service. The run's similarity is the weighted mean, scaled down when its instructions are another
agent's (``system`` under :data:`SYSTEM_VETO`); :func:`assign` takes the best profile at or above
:data:`THRESHOLD`.

A match is **mutual**: the run must also show little that the agent's runs never showed
(:meth:`AgentProfile.known_share`, over the channels an agent shows whatever its task: instructions,
layout, models, service; the layout must be known on its own); the weighted similarity forgives a
young profile what it has not seen, so without this a run that contains all of a one-run agent and
much more (another ReAct agent with more tools and another layout) joins it, and the merged agent
absorbs the rest.

Online, per tenant, in arrival order: ``assign`` against the stored profiles; a match
``update``\\ s that profile, no match starts a new one keyed :func:`new_agent_key`. **Consolidation**
undoes what the first runs decided: when an agent reaches 5, 10, 20, 40, … runs
(:func:`~model.core.consolidation.consolidation_due`) it takes over each agent with fewer runs that it now matches: a
provisional one (under :data:`PROVISIONAL_RUNS` runs) when it takes every one of its runs
(:func:`~model.core.consolidation.absorbs`), an established one when each takes the other's typical run (:func:`~model.core.consolidation.same_agent`,
:meth:`AgentProfile.core`). :func:`~model.core.consolidation.infer_agents` records such merges as aliases; the service re-keys
the runs (``serve.services.agents``). A profile
records the runs whose instructions changed while they still matched (:attr:`AgentProfile.changes`),
so a prompt edited mid-week is followed as one agent and says so in :meth:`AgentProfile.describe`.

>>> from model.core.schema import Step, Trace
>>> def run(task: str, tool: str) -> Trace:
...     return Trace(steps=[Step(kind="system", content="You are the billing agent of Acme. Be brief and exact."),
...                         Step(kind="user_input", content=task),
...                         Step(kind="tool_call", tool_name=tool, tool_args={"id": 1}, content='{"id": 1}')])
>>> profiles = {"agent-a": AgentProfile.from_signatures([signature(run("refund order 7", "refund"))])}
>>> assign(signature(run("where is invoice 9?", "invoice")), profiles)[0]
'agent-a'
>>> other = Trace(steps=[Step(kind="user_input", content="Write a haiku about autumn leaves.")])
>>> assign(signature(other), profiles)[0] is None
True
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from model.core.schema import StepKind, Trace

#: Signature / profile JSON version.
VERSION = 1
#: The similarity at or above which a run joins a profile.
THRESHOLD = 0.6
#: Channel weights (see the module docstring).
WEIGHTS: dict[str, float] = {"system": 2.0, "opening": 2.0, "shape": 2.5, "args": 1.0, "tools": 1.5,
                             "model": 2.0, "ops": 0.5, "service": 2.0}
CHANNELS: tuple[str, ...] = tuple(WEIGHTS)
#: Channels read from the text (compared only when the run recorded its content).
TEXT_CHANNELS = frozenset({"system", "opening", "shape", "args"})
#: Channels compared only when both the run and the profile carry them (formats differ in them).
OPTIONAL_CHANNELS = frozenset({"model", "ops", "service"})
#: A text channel's evidence is full from this much template (summed feature weights) on.
EVIDENCE_FEATURES = 20.0
#: System similarity (both ways) at or below ``SYSTEM_FLOOR`` counts 0, at or above ``SYSTEM_FULL`` 1.
SYSTEM_FLOOR, SYSTEM_FULL = 0.5, 0.9
#: A system similarity under this scales the whole similarity down by the shortfall (times its evidence).
SYSTEM_VETO = 0.5
#: A run that opens otherwise than all of the agent's runs (who speaks first) has its similarity scaled
#: by ``1 - OPENS_VETO``.
OPENS_VETO = 0.5
#: How much less a matching model (or LLM operation) weighs than a different one.
SAME_MODEL_DISCOUNT = 0.75
#: The evidence of a run lacking the tools the profile's runs have, or having tools where they had none
#: (text channels: the template's size).
ABSENT_EVIDENCE = 0.25
#: Most features a profile keeps per channel (least-seen dropped first).
PROFILE_CAP: dict[str, int] = {"system": 600, "opening": 600, "shape": 128, "args": 256, "tools": 256,
                               "model": 64, "ops": 32, "service": 32}
#: The system text keeps one trigram in ``SYSTEM_SAMPLE`` (chosen by hash: the same ones every run).
SYSTEM_SAMPLE = 3
#: Channels that name an agent whatever its task: where the run or the agent shows one, a match needs one
#: of them compared (tools alone never make one; see the module docstring).
IDENTITY_CHANNELS = frozenset({"system", "opening", "shape", "model", "service"})
#: The OpenTelemetry SDKs' default ``service.name`` when the application sets none: names no service.
DEFAULT_SERVICE = re.compile(r"^unknown_service(:.*)?$")
#: Channels compared the other way round (:meth:`AgentProfile.known_share`): what an agent shows in
#: every run whatever its task (its instructions, layout, models, service). Left out: the tools and
#: argument names a run uses (they follow its task), and the opening (it holds the task).
REVERSE_CHANNELS: tuple[str, ...] = ("system", "shape", "model", "ops", "service")
#: An inferred agent of fewer runs is provisional: its runs are checked again, and it is merged into an
#: established agent that now takes every one of them (:func:`~model.core.consolidation.absorbs`; the first runs an agent's
#: profile sees decide what joins it, so an agent's first run can start an agent of its own).
PROVISIONAL_RUNS = 5
#: Characters read from the head and the tail of a text (a long task in the middle is skipped).
HEAD_CHARS, TAIL_CHARS = 6000, 1500
#: A matched run whose ``system`` similarity is below this is recorded as a change.
CHANGE_BELOW = 0.8
MAX_CHANGES = 8
#: Changed runs this close to the last one extend its record instead of starting a new one.
CHANGE_GAP = 20
EXCERPT_CHARS = 160

_WORD = re.compile(r"\w+")
_BRACKET_CALL = re.compile(r"^\s*\w+\[.*\]\s*$", re.DOTALL)
_FAMILY_DATE = re.compile(r"-\d{4}-\d{2}-\d{2}$|-\d{8}$")
_MASK = 0xFFFFFFFF
_word_hash: dict[str, int] = {}
_OPENS = tuple(zlib.crc32(f"opens:{k.value}".encode()) for k in StepKind)
_system_cache: dict[int, tuple[tuple[int, ...], frozenset[int]]] = {}


def _h(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


def _words(text: str) -> list[int]:
    if len(text) > HEAD_CHARS + TAIL_CHARS:
        text = text[:HEAD_CHARS] + "\n" + text[-TAIL_CHARS:]
    if len(_word_hash) > 200_000:
        _word_hash.clear()
    out = []
    for w in _WORD.findall(text.lower()):
        h = _word_hash.get(w)
        if h is None:
            h = _word_hash[w] = _h(w)
        out.append(h)
    return out


def _trigrams(text: str, sample: int = 1) -> set[int]:
    """Hashed word trigrams of ``text`` (its head and tail), one in ``sample`` kept by hash."""
    w = _words(text)
    if len(w) < 3:
        return {_h("short:" + " ".join(map(str, w)))} if w else set()
    out = set()
    for a, b, c in zip(w, w[1:], w[2:], strict=False):
        h = ((a * 0x9E3779B1) ^ (b * 0x85EBCA77) ^ (c * 0xC2B2AE3D)) & _MASK
        h = (h ^ (h >> 15)) * 0x2C1B3C6D & _MASK
        if h % sample == 0:
            out.add(h)
    return out


def _system_features(text: str) -> tuple[tuple[int, ...], frozenset[int]]:
    """The system text's features, cached by the text (an agent's instructions repeat)."""
    key = _h(text) ^ len(text)
    hit = _system_cache.get(key)
    if hit is None:
        if len(_system_cache) > 256:
            _system_cache.clear()
        feats = _trigrams(text, SYSTEM_SAMPLE)
        hit = _system_cache[key] = (tuple(sorted(feats)), frozenset(feats))
    return hit


def _snippet(text: str) -> str:
    return text[: EXCERPT_CHARS * 4].strip()[:EXCERPT_CHARS]


def _blank(text: str) -> bool:
    return not text or text.isspace()


def model_family(name: str) -> str:
    """The base model of a model name: a fine-tune's base, without a date suffix.

    >>> model_family("ft:gpt-4.1-2025-04-14:sierra:tau2-full-sft:BzrYdMNm"), model_family("gpt-4o-2024-08-06")
    ('gpt-4.1', 'gpt-4o')
    """
    base = name.strip().lower().removeprefix("ft:").split(":")[0].split("/")[-1]
    return _FAMILY_DATE.sub("", base)


@dataclass(frozen=True)
class RunSignature:
    """What one run shows about its agent (never its task): hashed features per channel.

    ``content``: whether the run recorded its message content (spans with content capture off
    do not; their text channels are then left out). ``excerpt``: the first characters of its
    instructions (for :meth:`AgentProfile.describe`); ``tool_names`` / ``models`` / ``services``
    in clear for the same.
    """

    channels: Mapping[str, tuple[int, ...]]
    content: bool = True
    excerpt: str = ""
    tool_names: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    services: tuple[str, ...] = ()
    _sets: dict[str, frozenset[int]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def empty(self) -> bool:
        """Nothing to tell its agent by (no step with content, tool, model or service): such a run
        matches no profile, and should not start an agent of its own."""
        return not any(self.channels.values())

    def features(self, channel: str) -> frozenset[int]:
        got = self._sets.get(channel)
        if got is None:
            got = self._sets[channel] = frozenset(self.channels.get(channel, ()))
        return got

    def to_json(self) -> dict[str, Any]:
        return {"version": VERSION, "content": self.content, "excerpt": self.excerpt,
                "tool_names": list(self.tool_names), "models": list(self.models), "services": list(self.services),
                "channels": {c: list(v) for c, v in self.channels.items() if v}}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RunSignature:
        chans = d.get("channels") or {}
        return cls(channels={c: tuple(int(x) for x in chans[c]) for c in CHANNELS if c in chans},
                   content=bool(d.get("content", True)), excerpt=str(d.get("excerpt", "")),
                   tool_names=tuple(map(str, d.get("tool_names", ()))), models=tuple(map(str, d.get("models", ()))),
                   services=tuple(map(str, d.get("services", ()))))


def _call_format(content: str) -> str:
    text = content.strip()
    if not text:
        return "empty"
    if text[0] in "{[" and text[-1] in "}]" and not _BRACKET_CALL.match(text):
        return "json"
    return "bracket" if _BRACKET_CALL.match(text) else "text"


def signature(trace: Trace) -> RunSignature:
    """The :class:`RunSignature` of ``trace`` (see the module docstring for the channels)."""
    steps = trace.steps
    content = any(not _blank(s.content) for s in steps) and not any(
        s.metadata.get("content_recorded") is False for s in steps if s.kind is not StepKind.TOOL_RESULT)
    chans: dict[str, set[int]] = {c: set() for c in CHANNELS}
    system_text = "\n".join(s.content for s in steps if s.kind is StepKind.SYSTEM)
    excerpt = ""
    system: tuple[tuple[int, ...], frozenset[int]] | None = None
    if content:
        if not _blank(system_text):
            system = _system_features(system_text)
            excerpt = _snippet(system_text)
        talk = [s for s in steps if s.kind is not StepKind.SYSTEM]
        first_user = next((i for i, s in enumerate(talk) if s.kind is StepKind.USER_INPUT), None)
        opening = talk[: first_user + 1] if first_user is not None else talk[:1]
        for s in opening:
            chans["opening"].update(_trigrams(s.content))
        if not excerpt and opening:
            excerpt = _snippet(opening[0].content)
        users = sum(s.kind is StepKind.USER_INPUT for s in talk)
        shape = [f"opens:{talk[0].kind.value if talk else ''}", "first:" + ">".join(s.kind.value for s in talk[:3]),
                 f"users:{min(users, 2)}",
                 f"reasons:{any(s.kind is StepKind.LLM_REASONING for s in talk)}"]
        calls = [s.content[:200].strip() for s in talk if s.kind is StepKind.TOOL_CALL]
        shape += {f"call:{_call_format(c)}" for c in calls}
        shape += {"verb:" + c.split("[", 1)[0] for c in calls if _BRACKET_CALL.match(c)}
        chans["shape"].update(_h(x) for x in shape)
    tools: set[str] = {t.name for t in trace.tools}
    for s in steps:
        if s.tool_name and s.kind in (StepKind.TOOL_CALL, StepKind.TOOL_RESULT):
            tools.add(s.tool_name)
            if s.kind is StepKind.TOOL_CALL and isinstance(s.tool_args, dict):
                chans["args"].add(_h(f"{s.tool_name}({','.join(sorted(map(str, s.tool_args)))})"))
    chans["tools"].update(_h("tool:" + t) for t in tools)
    models = sorted({s.model for s in steps if s.model})
    for m in models:
        chans["model"].update((_h("model:" + m.lower()), _h("family:" + model_family(m))))
    for s in steps:
        for key in ("gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.system"):
            v = s.metadata.get(key)
            if isinstance(v, str):
                chans["ops"].add(_h(f"{key}={v}"))
    meta = trace.metadata if isinstance(trace.metadata, dict) else {}
    service = meta.get("service.name")
    services = (service,) if isinstance(service, str) and service and not DEFAULT_SERVICE.match(service) else ()
    chans["service"].update(_h("service:" + s) for s in services)
    out = {c: tuple(sorted(v)) for c, v in chans.items() if v}
    if system is not None:
        out = {"system": system[0], **out}
    sig = RunSignature(channels=out, content=content, excerpt=excerpt, tool_names=tuple(sorted(tools)),
                       models=tuple(models), services=services)
    if system is not None:
        sig._sets["system"] = system[1]
    return sig


class AgentProfile:
    """An inferred agent, learned from its runs' signatures (bounded: :data:`PROFILE_CAP`).

    ``n_runs``: runs seen; ``n_content``: those that recorded their content; per channel, how many
    runs showed it (``present``) and how many showed each feature (``counts``); ``excerpt``: the
    common start of its runs' instructions (its fixed part once it has two runs); ``changes``: the
    runs that matched while their instructions differed; ``origin``: why it was started (the
    nearest agent then, and the channels that differed: :func:`new_profile`).
    """

    def __init__(self) -> None:
        self.n_runs = 0
        self.n_content = 0
        self.present: dict[str, int] = {c: 0 for c in CHANNELS}
        self.counts: dict[str, dict[int, int]] = {c: {} for c in CHANNELS}
        self.excerpt: str | None = None
        self.names: dict[str, dict[str, int]] = {"tools": {}, "models": {}, "services": {}}
        self.changes: list[dict[str, Any]] = []
        self.origin: dict[str, Any] | None = None
        self._weights: dict[str, tuple[dict[int, float], float, frozenset[int]]] = {}

    # -- learning -------------------------------------------------------------------------------
    def update(self, sig: RunSignature) -> None:
        """Add one run (its signature) to the profile."""
        if self.n_runs and sig.content and self.n_content:
            got = self._channel("system", sig)
            if got is not None and got[1] >= 0.5 and got[0] < CHANGE_BELOW:  # a template of some size
                self._note_change(got[0])
        self.n_runs += 1
        if sig.content:
            self.n_content += 1
            self.excerpt = sig.excerpt if self.excerpt is None else _common_prefix(self.excerpt, sig.excerpt)
        for c in CHANNELS:
            feats = sig.channels.get(c, ())
            if not feats:
                continue
            self.present[c] += 1
            counts = self.counts[c]
            for f in feats:
                counts[f] = counts.get(f, 0) + 1
            if len(counts) > PROFILE_CAP[c] * 5 // 4:
                keep = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: PROFILE_CAP[c]]
                self.counts[c] = dict(keep)
        for key, values in (("tools", sig.tool_names), ("models", sig.models), ("services", sig.services)):
            seen = self.names[key]
            for v in values:
                seen[v] = seen.get(v, 0) + 1
            if len(seen) > 64:
                self.names[key] = dict(sorted(seen.items(), key=lambda kv: (-kv[1], kv[0]))[:64])
        self._weights = {}

    def _note_change(self, sim: float) -> None:
        """A run matched although its instructions differ: one change per stretch of such runs."""
        run = self.n_runs + 1
        last = self.changes[-1] if self.changes else None
        if last is not None and run - int(last["last_run"]) <= CHANGE_GAP:
            last.update(last_run=run, runs=int(last["runs"]) + 1)
            return
        self.changes = [*self.changes, {"first_run": run, "last_run": run, "runs": 1,
                                        "system_similarity": round(sim, 3),
                                        "reason": "instructions differ from the agent's fixed template"}][-MAX_CHANGES:]

    @classmethod
    def from_signatures(cls, sigs: Sequence[RunSignature]) -> AgentProfile:
        """A profile learned from ``sigs`` in order (used to split and merge agents)."""
        p = cls()
        for s in sigs:
            p.update(s)
        return p

    # -- comparing ------------------------------------------------------------------------------
    def _runs_for(self, channel: str) -> int:
        return self.n_content if channel in TEXT_CHANNELS else self.n_runs

    def _weighted(self, channel: str) -> tuple[dict[int, float], float, frozenset[int]]:
        """Each feature's weight ``(count / runs with the channel) ** 2``, their sum, the features."""
        got = self._weights.get(channel)
        if got is None:
            n = max(self.present[channel], 1)
            w = {f: (c / n) ** 2 for f, c in self.counts[channel].items()}
            got = self._weights[channel] = (w, math.fsum(w.values()), frozenset(w))
        return got

    def _channel(self, c: str, sig: RunSignature) -> tuple[float, float] | None:
        """``(similarity, evidence)`` of channel ``c``, or ``None`` when it does not count."""
        if c in TEXT_CHANNELS and not (sig.content and self.n_content):
            return None
        runs = self._runs_for(c)
        if not runs:
            return None
        present = self.present[c]
        feats = sig.features(c)
        if c in OPTIONAL_CHANNELS and (not feats or not present):
            return None
        if not feats:  # the run lacks what the profile's runs had (as often as they had it)
            if not present:
                return None
            evidence = min(1.0, self._weighted(c)[1] / EVIDENCE_FEATURES) if c in TEXT_CHANNELS else ABSENT_EVIDENCE
            return 1.0 - present / (runs + 1), evidence
        if not present:  # the run has what none of the profile's runs had (weak while it has few runs)
            if c not in TEXT_CHANNELS:
                return 0.0, ABSENT_EVIDENCE
            return 0.0, min(1.0, len(feats) / EVIDENCE_FEATURES) * runs / (runs + 1)
        rate = present / runs
        weights, total, keys = self._weighted(c)
        shared = feats & keys
        found = math.fsum([weights[f] for f in shared]) / total if total else 0.0  # the profile's template in the run
        if c in ("tools", "model"):  # the run's tools known to the profile; an unseen one forgiven early
            known = (len(shared) + (len(feats) - len(shared)) / (present + 1)) / len(feats)
            sim = (found + known) / 2  # (how often runs had tools at all is the absent case's, weak)
            # many agents share a model: the same one says little, another one much
            return sim, (1.0 - SAME_MODEL_DISCOUNT * sim) if c == "model" else 1.0
        if c == "ops":
            return rate * found, 1.0 - SAME_MODEL_DISCOUNT * rate * found
        if c == "system":  # both ways, sharpened: an edited prompt stays close, a rewritten one does not
            both = found * len(shared) / len(feats)
            sharp = min(1.0, max(0.0, (both - SYSTEM_FLOOR) / (SYSTEM_FULL - SYSTEM_FLOOR)))
            return rate * sharp, min(1.0, total / EVIDENCE_FEATURES)
        if c == "shape":  # the layout is the agent's from its first run on
            return rate * found, 1.0
        # opening, args: what is template is learned over runs, so a small overlap says little
        # while the profile has few runs; a large one says much from the first run on
        known = present / (present + 1)
        return rate * found, min(1.0, total / EVIDENCE_FEATURES) * (known + (1.0 - known) * found)

    def channel_similarities(self, sig: RunSignature) -> dict[str, float]:
        """Per channel that counts (see the module docstring), the similarity in [0, 1]."""
        return {c: got[0] for c in CHANNELS if (got := self._channel(c, sig)) is not None}

    def similarity(self, sig: RunSignature) -> float:
        """How much ``sig`` looks like this agent's runs, in [0, 1] (0 for an empty profile): the
        channels' similarities, each weighted by :data:`WEIGHTS` times the evidence it carries."""
        if sig.empty:
            return 0.0
        num = den = 0.0
        veto = 1.0
        named = False
        for c in CHANNELS:
            got = self._channel(c, sig)
            if got is not None:
                named = named or c in IDENTITY_CHANNELS
                w = WEIGHTS[c] * got[1]
                num += w * got[0]
                den += w
                if c == "system":  # other instructions: another agent, however alike its tools and layout
                    veto *= 1.0 - got[1] * max(0.0, SYSTEM_VETO - got[0])
        if sig.content and self._opens_otherwise(sig):  # it waits for the user where the agent greets, or so
            veto *= 1.0 - OPENS_VETO
        if not named and any(self.present[c] or sig.channels.get(c) for c in IDENTITY_CHANNELS):
            return 0.0  # nothing that names an agent could be compared: the tools alone say too little
        return veto * num / den if den else 0.0

    def core(self) -> RunSignature:
        """The agent's typical run: per channel its runs mostly show, the features at least half of
        them showed (its template; a one-run profile's core is that run)."""
        chans = {}
        for c in CHANNELS:
            n = self.present[c]
            if n and 2 * n >= self._runs_for(c):
                feats = tuple(sorted(f for f, k in self.counts[c].items() if 2 * k >= n))
                if feats:
                    chans[c] = feats
        return RunSignature(channels=chans, content=2 * self.n_content >= self.n_runs > 0)

    def known_share(self, sig: RunSignature) -> float:
        """The other way round: how much of what ``sig`` shows this agent's runs have shown before
        (per channel of :data:`REVERSE_CHANNELS`, the share of the run's features the profile has
        seen at all, weighted as in :meth:`similarity`). 1.0 when nothing can be compared."""
        num = den = 0.0
        for c in REVERSE_CHANNELS:
            feats = sig.features(c)
            if not feats or not self.present[c] or (c in TEXT_CHANNELS and not (sig.content and self.n_content)):
                continue
            seen = self._weighted(c)[2]
            share = len(feats & seen) / len(feats)
            if c == "shape" and share < THRESHOLD:
                return share
            num += WEIGHTS[c] * share
            den += WEIGHTS[c]
        return num / den if den else 1.0

    def _opens_otherwise(self, sig: RunSignature) -> bool:
        """Whether the agent's runs all open alike (who speaks first), from two runs on, and this
        run opens otherwise."""
        if self.n_content < 2:
            return False
        counts = self.counts["shape"]
        usual = [f for f in _OPENS if counts.get(f, 0) >= 0.9 * self.n_content]
        return bool(usual) and usual[0] not in sig.features("shape")

    # -- people and storage ---------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """What a person sees of the agent: its tools, models and service names (most used
        first), the fixed start of its instructions, its run count and any instruction changes."""
        def top(key: str, k: int = 12) -> list[str]:
            return [n for n, _ in sorted(self.names[key].items(), key=lambda kv: (-kv[1], kv[0]))[:k]]
        return {"n_runs": self.n_runs, "tools": top("tools"), "models": top("models"), "service_names": top("services"),
                "template_excerpt": self.excerpt or "", "instruction_changes": list(self.changes),
                "origin": self.origin}

    def to_json(self) -> dict[str, Any]:
        return {"version": VERSION, "n_runs": self.n_runs, "n_content": self.n_content, "present": dict(self.present),
                "counts": {c: [[f, n] for f, n in sorted(v.items())] for c, v in self.counts.items() if v},
                "excerpt": self.excerpt, "names": {k: dict(v) for k, v in self.names.items()},
                "changes": list(self.changes), "origin": self.origin}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AgentProfile:
        p = cls()
        p.n_runs, p.n_content = int(d.get("n_runs", 0)), int(d.get("n_content", 0))
        p.present.update({c: int(v) for c, v in (d.get("present") or {}).items() if c in CHANNELS})
        for c, rows in (d.get("counts") or {}).items():
            if c in CHANNELS:
                p.counts[c] = {int(f): int(n) for f, n in rows}
        p.excerpt = None if d.get("excerpt") is None else str(d["excerpt"])
        for k, v in (d.get("names") or {}).items():
            if k in p.names and isinstance(v, dict):
                p.names[k] = {str(n): int(c) for n, c in v.items()}
        p.changes = [dict(x) for x in d.get("changes") or [] if isinstance(x, dict)][-MAX_CHANGES:]
        p.origin = dict(d["origin"]) if isinstance(d.get("origin"), dict) else None
        return p


def _common_prefix(a: str, b: str) -> str:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return a[:n]


def new_agent_key(sig: RunSignature) -> str:
    """A short key for the agent a run starts, from its signature (the same signature, the same key).

    >>> new_agent_key(RunSignature(channels={"tools": (1, 2)})).startswith("agent-")
    True
    """
    payload = json.dumps(sig.to_json(), sort_keys=True, separators=(",", ":"))
    return "agent-" + hashlib.sha256(payload.encode("utf-8")).hexdigest()[:8]


def assign(sig: RunSignature, profiles: Mapping[str, AgentProfile],
           threshold: float = THRESHOLD) -> tuple[str | None, float]:
    """The best agent for ``sig``: ``(key, similarity)`` when its similarity reaches ``threshold``,
    else ``(None, best similarity)`` (0.0 with no profiles). Ties go to the smaller key.

    A match is mutual: the best profile at or above ``threshold`` whose core also reaches it the
    other way round (:meth:`AgentProfile.known_share`); a run that shows much the agent's
    runs never do (other tools, another layout) is not that agent's, however much of the agent it
    contains."""
    scored = sorted(((profiles[k].similarity(sig), k) for k in profiles), key=lambda x: (-x[0], x[1]))
    best = scored[0][0] if scored else 0.0
    for s, key in scored:
        if s < threshold:
            break
        if profiles[key].known_share(sig) >= threshold:
            return key, s
    return None, best


def new_profile(sig: RunSignature, profiles: Mapping[str, AgentProfile]) -> AgentProfile:
    """The profile of a new agent that ``sig`` starts, recording why no agent took it
    (:attr:`AgentProfile.origin`: the nearest agent, its similarity, the channels that differ)."""
    p = AgentProfile()
    best = max(sorted(profiles), key=lambda k: profiles[k].similarity(sig), default=None)
    if best is not None:
        sims = profiles[best].channel_similarities(sig)
        differ = sorted((v, c) for c, v in sims.items() if v < 0.5)
        p.origin = {"nearest": best, "similarity": round(profiles[best].similarity(sig), 3),
                    "channels": {c: round(v, 3) for c, v in sims.items()},
                    "reason": "no agent reached the threshold" + (
                        f"; unlike {best}: " + ", ".join(f"{c} {v:.2f}" for v, c in differ) if differ else "")}
    p.update(sig)
    return p


__all__ = ["CHANNELS", "PROVISIONAL_RUNS", "THRESHOLD", "WEIGHTS", "AgentProfile", "RunSignature", "assign",
           "model_family", "new_agent_key", "new_profile", "signature"]

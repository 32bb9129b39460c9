"""The trace generator: seeded, reproducible runs of tool-using agents with failures at known steps.

``generate(config)`` yields :class:`model.core.schema.Trace` objects. Trace ``i`` is a pure function of
``(config.seed, i)`` and the config, so any slice can be rebuilt on its own. Each trace:

1. picks a language and a task family, and lets the family write a healthy :class:`Scenario`
   (goal template, entities, tool calls with realistic payloads, answers);
2. with probability ``1 - healthy_rate`` picks a failure kind (uniformly over kinds, so each gets a
   fair share) and one of its recipes (:mod:`model.data.datagen.inject`), plus, sometimes, a second
   mid-run failure; otherwise a healthy variant, many of them hard negatives (retry-free polling,
   honest "nothing found", self-correction, long productive searches, polite apologies);
3. is rendered through :class:`model.data.tracebuilder.TraceBuilder`, which keeps step indices,
   ``source_index`` and call ids consistent and records each label at its step.

>>> cfg = GenerateConfig(n_traces=3, seed=7)
>>> [t.labels.provenance["family"] for t in generate(cfg)] == [
...     t.labels.provenance["family"] for t in generate(cfg)]
True
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model.core.errors import InputError
from model.core.schema import Trace
from model.data.datagen.families import FAMILIES
from model.data.datagen.healthy import HEALTHY_VARIANTS, long_productive
from model.data.datagen.inject import MIDRUN, failure_recipes
from model.data.datagen.lexicon import MODELS, Lexicon
from model.data.datagen.payloads import DISALLOWED, give_tool
from model.data.datagen.scenario import Beat, Scenario, dump
from model.data.tracebuilder import TraceBuilder

GENERATOR_VERSION = "1"

CLOSINGS_EN = ["Let me know if you need anything else.", "Hope this helps!", "Anything else?", "Happy to help further."]
CLOSINGS_ZH = ["还有其他需要吗？", "希望对你有帮助！", "如有问题随时告诉我。"]


@dataclass
class GenerateConfig:
    """The ``generate`` section of params.yaml, validated.

    Parameters
    ----------
    n_traces:
        How many traces.
    seed:
        Master seed: trace ``i`` is made from ``(seed, i)``.
    languages:
        Language → weight (``en``, ``zh``).
    families:
        Family → weight (names of :data:`model.data.datagen.families.FAMILIES`).
    healthy_rate:
        Share of traces without a planted failure (hard negatives among them).
    second_failure_rate:
        Of the failing traces, the share that get a second, mid-run failure too.
    kind_weights:
        Failure kind → relative weight (default 1 each).
    healthy_variants:
        Healthy variant → weight.
    system_prompt_rate:
        Share of traces that start with a system message.
    """

    n_traces: int = 22_000
    seed: int = 20_261_129
    languages: dict[str, float] = field(default_factory=lambda: {"en": 0.6, "zh": 0.4})
    families: dict[str, float] = field(default_factory=lambda: {f: 1.0 for f in FAMILIES})
    healthy_rate: float = 0.3
    second_failure_rate: float = 0.2
    kind_weights: dict[str, float] = field(default_factory=dict)
    healthy_variants: dict[str, float] = field(
        default_factory=lambda: {"clean": 3.0, "honest_empty": 1.5, "polling": 1.0, "self_correction": 1.0,
                                 "long_productive": 1.5, "polite_prefix": 1.0, "safe_security": 0.5}
    )
    system_prompt_rate: float = 0.85
    #: share of traces padded with many distinct, productive calls (runs of 30-70 steps)
    long_rate: float = 0.12

    def __post_init__(self) -> None:
        if self.n_traces < 0:
            raise InputError(f"must be >= 0, got {self.n_traces}", path="generate.n_traces")
        for name in self.families:
            if name not in FAMILIES:
                raise InputError(f"unknown family {name!r}; valid: {', '.join(FAMILIES)}", path="generate.families")
        for lang in self.languages:
            if lang not in ("en", "zh"):
                raise InputError(f"unknown language {lang!r}; valid: en, zh", path="generate.languages")
        for v in self.healthy_variants:
            if v not in HEALTHY_VARIANTS:
                raise InputError(f"unknown healthy variant {v!r}; valid: {', '.join(HEALTHY_VARIANTS)}",
                                 path="generate.healthy_variants")
        if not 0 <= self.healthy_rate <= 1:
            raise InputError(f"must be in [0, 1], got {self.healthy_rate}", path="generate.healthy_rate")

    @classmethod
    def from_params(cls, section: dict[str, Any]) -> GenerateConfig:
        known = set(cls.__dataclass_fields__)
        extra = set(section) - known - {"out"}
        if extra:
            raise InputError(f"unknown keys {sorted(extra)}; valid: {sorted(known)}", path="generate")
        return cls(**{k: v for k, v in section.items() if k in known})


def _choose(r: random.Random, weights: dict[str, float]) -> str:
    names = [k for k, w in weights.items() if w > 0]
    return r.choices(names, [weights[k] for k in names])[0]


def new_scenario(family: str, lang: str, r: random.Random) -> Scenario:
    """A healthy scenario of ``family`` with its system/user opening and final answer beats."""
    sc = Scenario(family=family, task="", lang=lang, template="", lx=Lexicon(r, lang), rng=r)
    FAMILIES[family](sc)
    sc.meta["allowed"] = [t["name"] for t in sc.tools]
    if r.random() < 0.4:
        # agents are often given more tools than a request allows: the allow-list is the request's
        for tool, args, _ in r.sample(DISALLOWED, r.randrange(1, 3)):
            give_tool(sc, tool, args)
    sc.beats = [Beat("system", sc.system), Beat("user", sc.goal)] + sc.beats + [
        Beat("final", sc.final_ok, speaker=sc.agent)]
    return sc


# Kinds in the order recipes are listed (one weight each).
def _recipes_by_kind(recipes: dict[str, tuple[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, (kind, _) in recipes.items():
        out.setdefault(kind, []).append(name)
    # tool_error is also planted by the *_ignored recipes' first half; keep ignored under its own kind
    return out


def make_one(cfg: GenerateConfig, index: int) -> Trace:
    """Trace ``index`` of the dataset described by ``cfg`` (deterministic)."""
    r = random.Random(f"{cfg.seed}:{index}")
    lang = _choose(r, cfg.languages)
    family = _choose(r, cfg.families)

    def other() -> Scenario:
        # another request's answer: another family, or the same family with other entities
        fam = family if r.random() < 0.4 else _choose(r, {f: 1.0 for f in FAMILIES if f != family})
        return new_scenario(fam, lang, random.Random(r.random()))

    recipes = failure_recipes(other)
    by_kind = _recipes_by_kind(recipes)
    applied: list[str] = []
    variant = None
    sc = new_scenario(family, lang, r)
    long_run = r.random() < cfg.long_rate
    if long_run:
        long_productive(sc, r, (12, 32))
    if r.random() >= cfg.healthy_rate:
        weights = {k: cfg.kind_weights.get(k, 1.0) for k in by_kind}
        kind = _choose(r, weights)
        for _attempt in range(8):
            name = r.choice(by_kind[kind])
            if recipes[name][1](sc, r):
                applied.append(name)
                break
            sc = new_scenario(family, lang, r)  # this scenario can't carry it: write another
            if long_run:
                long_productive(sc, r, (12, 32))
        has_final = any(x.kind == "final" for x in sc.beats)
        if r.random() < cfg.second_failure_rate and applied and has_final:
            second = r.choice([m for m in MIDRUN if m != applied[0]])
            if recipes[second][1](sc, r):
                applied.append(second)
    if not applied:
        variant = _choose(r, cfg.healthy_variants)
        if not HEALTHY_VARIANTS[variant](sc, r):
            variant = "clean"
    fin = next((x for x in reversed(sc.beats) if x.kind == "final"), None)
    if fin is not None and fin.text.strip() and r.random() < 0.12:
        # closing pleasantries, healthy or not
        fin.text += " " + r.choice(CLOSINGS_ZH if lang == "zh" else CLOSINGS_EN)
    trace = render(sc, seed=r.randrange(2**31), with_system=r.random() < cfg.system_prompt_rate)
    assert trace.labels is not None
    trace.labels.provenance.update({
        "generator": "model.data.datagen", "generator_version": GENERATOR_VERSION, "family": family, "task": sc.task, "template": sc.template, "language": lang,
        "recipes": applied, "variant": variant, "index": index, "master_seed": cfg.seed,
        "constraint": sc.constraint.text if sc.constraint else None, "long": long_run,
    })
    trace.session_id = f"{sc.template}#{r.randrange(40)}"
    return trace


def render(sc: Scenario, *, seed: int, with_system: bool = True) -> Trace:
    """Turn the scenario's beats into a Trace with :class:`TraceBuilder`; labels land on their steps."""
    r = random.Random(seed)
    b = TraceBuilder(seed, trace_id=f"gen-{sc.family}-{seed:010d}", task_type=sc.family, language=sc.lang,
                     model=r.choice(MODELS))
    b.tools(sc.tools)
    b.metadata["allowed_tools"] = list(sc.meta.get("allowed", [t["name"] for t in sc.tools]))
    if sc.speakers:
        b.metadata["speakers"] = dict(sc.speakers)
    beats = [x for x in sc.beats if with_system or x.kind != "system"]
    call_ids: dict[int, str] = {}
    labels: list[tuple[str, int]] = []
    i = 0
    while i < len(beats):
        x = beats[i]
        grouped = x.kind in ("say", "call") and i + 1 < len(beats) and beats[i + 1].kind == "call" \
            and beats[i + 1].joined
        if grouped:
            b.new_message()
        j = i
        while True:
            step = _emit(b, beats[j], call_ids, sc)
            for kind in beats[j].fails:
                labels.append((kind, step))
            if not (grouped and j + 1 < len(beats) and beats[j + 1].kind == "call" and beats[j + 1].joined):
                break
            j += 1
        if grouped:
            b.end_message()
        i = j + 1
    for kind, step in labels:
        b.label(kind, step)
    return b.build()


def _emit(b: TraceBuilder, x: Beat, call_ids: dict[int, str], sc: Scenario) -> int:
    if x.kind == "system":
        return b.system(x.text)
    if x.kind == "user":
        return b.user(x.text)
    if x.kind == "think":
        return b.reasoning(x.text, speaker=x.speaker)
    if x.kind == "say":
        return b.say(x.text, speaker=x.speaker)
    if x.kind == "final":
        return b.final(x.text, speaker=x.speaker)
    if x.kind == "error":
        return b.error(x.text, error_type=x.error_type or "provider_error")
    if x.kind == "call":
        raw = x.raw_args if x.raw_args is not None else None
        cid = b.call(x.tool or "tool", x.args, raw_args=raw, speaker=x.speaker)
        if x.call_no is not None:
            call_ids[x.call_no] = cid
        return b.last
    if x.kind == "result":
        cid = call_ids.get(x.call_no if x.call_no is not None else -1, x.tool or "tool")
        terminal = sc.family == "multi_agent" and x.tool == "execute_code"  # AG2's terminal speaks the output
        step = b.result(cid, dump(x.payload), status=x.status or "ok", error_type=x.error_type,
                        latency_ms=x.latency_ms, speaker="Computer_terminal" if terminal else None)
        if "waited_s" in x.meta:
            b.steps[step].metadata["waited_s"] = x.meta["waited_s"]
        return step
    raise ValueError(f"unknown beat kind {x.kind!r}")


def generate(cfg: GenerateConfig, start: int = 0, stop: int | None = None) -> Iterator[Trace]:
    """Traces ``start .. stop-1`` (default: all ``cfg.n_traces``)."""
    for i in range(start, cfg.n_traces if stop is None else stop):
        yield make_one(cfg, i)


def write_jsonl(traces: Iterator[Trace], path: Path) -> int:
    """Write one Trace JSON per line (``None`` fields left out); returns the count."""
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("w", encoding="utf-8") as fh:
        for t in traces:
            fh.write(t.model_dump_json(exclude_none=True))
            fh.write("\n")
            n += 1
    return n


def read_jsonl(path: Path) -> Iterator[Trace]:
    """Read a file written by :func:`write_jsonl`; a bad line raises an InputError naming it."""
    with path.open(encoding="utf-8") as fh:
        for no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield Trace.model_validate_json(line)
            except ValueError as exc:
                raise InputError(f"not a Trace: {str(exc).splitlines()[0]}", path=str(path), line=no) from exc


def summary(traces: list[Trace]) -> dict[str, Any]:
    """Counts per failure kind (traces and step labels), language, family and length."""
    kinds_traces: dict[str, int] = {}
    kinds_steps: dict[str, int] = {}
    langs: dict[str, int] = {}
    fams: dict[str, int] = {}
    kinds_lang: dict[str, dict[str, int]] = {}
    healthy = 0
    lengths = []
    for t in traces:
        lengths.append(len(t.steps))
        langs[t.language or "?"] = langs.get(t.language or "?", 0) + 1
        fams[t.task_type or "?"] = fams.get(t.task_type or "?", 0) + 1
        if t.labels is None or t.labels.healthy:
            healthy += 1
            continue
        for k in {f.kind.value for f in t.labels.failures if f.kind is not None}:
            kinds_traces[k] = kinds_traces.get(k, 0) + 1
            kl = kinds_lang.setdefault(k, {})
            kl[t.language or "?"] = kl.get(t.language or "?", 0) + 1
        for f in t.labels.failures:
            if f.kind is None:
                continue
            kinds_steps[f.kind.value] = kinds_steps.get(f.kind.value, 0) + 1
    lengths.sort()
    return {
        "traces": len(traces),
        "healthy": healthy,
        "steps": sum(lengths),
        "length": {"min": lengths[0] if lengths else 0, "median": lengths[len(lengths) // 2] if lengths else 0,
                   "max": lengths[-1] if lengths else 0},
        "kinds_traces": dict(sorted(kinds_traces.items())),
        "kinds_steps": dict(sorted(kinds_steps.items())),
        "kinds_by_language": {k: dict(sorted(v.items())) for k, v in sorted(kinds_lang.items())},
        "languages": dict(sorted(langs.items())),
        "families": dict(sorted(fams.items())),
    }


def dumps_summary(s: dict[str, Any]) -> str:
    return json.dumps(s, indent=2, ensure_ascii=False, sort_keys=False) + "\n"

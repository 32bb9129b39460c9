"""The seven developer sets as ``bench/first_week.py``'s input: JSON lines ``{trace, format, failed, agent,
task}``, one file per set.

``python -m model.data.export_first_week OUTDIR [--sets tau_airline,…]``

* ``trace`` is what a caller of ``POST /v1/diagnose`` would send, as today's tests send it: the user-facing
  raw format where the loader has one — OpenAI chat messages (τ-airline, AgentProcessBench, τ²) or the
  Who&When log itself (``history`` with each message's speaker ``name``, and the log's other fields) —
  else the loader's native trace JSON (SWE, WebShop, Reflexion). It still carries what names the set or
  the label (``id`` set-prefixed, ``task_type``, ``labels``, ``metadata.task_id``, Who&When's
  ``mistake_*``): the bench strips them before posting, and checks that none survive.
* ``agent`` is the configuration (nine: ``tau_airline``, ``tau2_airline``, ``tau2_telecom``,
  ``tau2_telecom_solo`` — the ``no-user`` files —, ``agentprocessbench``, ``swe``, ``webshop``,
  ``reflexion_hotpotqa``, ``whowhen``); ``task`` the true task, τ²'s airline tasks keyed to the τ-airline
  scenario they were made from (matched by the customer's user id, then the instruction's words), so one
  task spans two sets. Both are for scoring only.
* ``spans`` is what an OpenTelemetry GenAI exporter would say of the run's LLM calls — ``{model, provider,
  operation}``, from the set's README (τ²: the run's model) — read only to write the run as GenAI spans
  with content capture off (:func:`model.data.genai_spans.otlp_content_off`), which always carry the model.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from model.core.errors import InputError
from model.data import realdata
from model.data.realdata import DEFAULT_ROOT, SOURCES, RealRun, load_source

_USER_ID = re.compile(r"\b[a-z]+_[a-z]+_\d{3,5}\b")
_WORD = re.compile(r"[a-z]+")


#: τ²'s model keys (its file names) → the model its spans name.
TAU2_MODELS = {"gpt-4.1": "gpt-4.1", "ft": "ft:gpt-4.1-2025-04-14:sierra:tau2-full-sft:BzrYdMNm"}
#: What a GenAI exporter would say of each set's LLM calls: (model, provider, operation). From the sets'
#: READMEs; AgentProcessBench's does not name its model (a stand-in name, one model); τ²'s runs name theirs.
SPAN_MODEL: dict[str, tuple[str, str | None, str]] = {
    "tau_airline": ("gpt-4o", "openai", "chat"),
    "agentprocessbench": ("agentprocessbench-policy-model", None, "chat"),
    "swe": ("gemini-3-pro-preview", "gcp.gemini", "chat"),
    "webshop": ("text-davinci-002", "openai", "text_completion"),
    "reflexion_hotpotqa": ("text-davinci-003", "openai", "text_completion"),
    "whowhen": ("gpt-4o", "openai", "chat"),
}


def span_fields(source: str, tau2_model: str | None = None) -> dict[str, str | None]:
    """The ``spans`` field of a run of ``source`` (τ²: its model key, ``gpt-4.1`` or ``ft``)."""
    if source == "tau2":
        return {"model": TAU2_MODELS[str(tau2_model)], "provider": "openai", "operation": "chat"}
    model, provider, op = SPAN_MODEL[source]
    return {"model": model, "provider": provider, "operation": op}


def _label_fields(r: RealRun) -> dict[str, Any]:
    """What today's tests post beside the run (the bench strips every one of them)."""
    assert r.trace.labels is not None
    return {"id": r.trace.id, "task_type": r.trace.task_type or r.source,
            "metadata": {"task_id": r.group}, "labels": r.trace.labels.model_dump(mode="json", exclude_none=True)}


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def tau2_airline_scenarios(root: Path) -> dict[str, int]:
    """τ² airline task id → the τ-airline ``task_id`` of the same scenario (same customer; among several
    of one customer's tasks, the instruction sharing most words). A task with no match is left out."""
    tau = json.loads(realdata._read_xz(root / SOURCES["tau_airline"] / "gpt-4o-airline.json.xz"))
    scen = {int(r["task_id"]): r["info"]["task"] for r in tau}
    name = next(n for n in realdata.TAU2_FILES if realdata.TAU2_FILES[n][1] == "airline")
    tasks = json.loads(realdata._read_xz(root / SOURCES["tau2"] / name))["tasks"]
    out: dict[str, int] = {}
    for t in tasks:
        text = json.dumps(t["user_scenario"]["instructions"])
        users = set(_USER_ID.findall(text))
        cands = [k for k, s in scen.items() if s.get("user_id") in users]
        if cands:
            w = _words(text)
            out[str(t["id"])] = max(cands, key=lambda k: (len(w & _words(scen[k]["instruction"])), -k))
    return out


def _tau(root: Path) -> Iterator[dict[str, Any]]:
    runs = {r.run_id: r for r in load_source("tau_airline", root)}
    for rec in json.loads(realdata._read_xz(root / SOURCES["tau_airline"] / "gpt-4o-airline.json.xz")):
        r = runs[f"tau_airline:{rec['task_id']}:{rec['trial']}"]
        yield {"trace": {"messages": rec["traj"], **_label_fields(r)}, "format": "openai", "failed": r.failed,
               "agent": "tau_airline", "task": f"airline:{rec['task_id']}", "spans": span_fields("tau_airline")}


def _apb(root: Path) -> Iterator[dict[str, Any]]:
    runs = {r.run_id: r for r in load_source("agentprocessbench", root)}
    raw = realdata._read_xz(root / SOURCES["agentprocessbench"] / "hotpotqa.jsonl.xz").decode("utf-8")
    for line in raw.splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        r = runs[f"agentprocessbench:{rec['query_index']}:{rec['sample_index']}"]
        msgs = [{**m, "tool_calls": realdata._literal(m["tool_calls"])} if m.get("tool_calls") else m
                for m in rec["messages"]]
        yield {"trace": {"messages": msgs, **_label_fields(r)}, "format": "openai", "failed": r.failed,
               "agent": "agentprocessbench", "task": r.group, "spans": span_fields("agentprocessbench")}


def tau2_configuration(domain: str, mode: str) -> str:
    """Which of τ²'s three agents a run is (truth only): airline, telecom, telecom solo (no-user mode)."""
    return "tau2_airline" if domain == "airline" else "tau2_telecom_solo" if mode == "no-user" else "tau2_telecom"


def _tau2(root: Path) -> Iterator[dict[str, Any]]:
    runs = {r.run_id: r for r in load_source("tau2", root)}
    scen = tau2_airline_scenarios(root)
    folder = root / SOURCES["tau2"]
    for name, (model, domain, mode) in realdata.TAU2_FILES.items():
        data = json.loads(realdata._read_xz(folder / name))
        policy = str(data["info"]["environment_info"]["policy"])
        tickets = {t["id"]: t.get("ticket") for t in data["tasks"]}
        for sim in data["simulations"]:
            h = realdata.label_hash(f"{domain}\x00{sim['task_id']}")
            r = runs[f"tau2:{domain}:{mode}:{model}:{h}"]
            msgs = realdata.tau2_messages(sim, policy, tickets.get(sim["task_id"]) if mode == "no-user" else None)
            agent = tau2_configuration(domain, mode)
            tid = str(sim["task_id"])
            task = f"airline:{scen[tid]}" if domain == "airline" and tid in scen else r.group
            yield {"trace": {"messages": msgs, **_label_fields(r)}, "format": "openai", "failed": r.failed,
                   "agent": agent, "task": task, "spans": span_fields("tau2", model)}


def _whowhen(root: Path) -> Iterator[dict[str, Any]]:
    runs = {r.run_id: r for r in load_source("whowhen", root)}
    for name, data in realdata._tar_members(root / SOURCES["whowhen"] / "logs.tar.xz"):
        if not name.endswith(".json"):
            continue
        log = json.loads(data)
        r = runs[f"whowhen:{Path(name).stem}"]
        # the log as it comes (its mistake_* and ground_truth are labels: the bench strips them)
        yield {"trace": {**log, **_label_fields(r)}, "format": "openai", "failed": r.failed,
               "agent": "whowhen", "task": r.group, "spans": span_fields("whowhen")}


def _native(source: str) -> Any:
    def gen(root: Path) -> Iterator[dict[str, Any]]:
        for r in load_source(source, root):
            t = r.trace.model_copy(deep=True)
            t.metadata = {**t.metadata, "task_id": r.group}
            yield {"trace": t.model_dump(mode="json", exclude_none=True), "format": "native", "failed": r.failed,
                   "agent": source, "task": r.group, "spans": span_fields(source)}
    return gen


EXPORTERS = {"tau_airline": _tau, "agentprocessbench": _apb, "swe": _native("swe"), "whowhen": _whowhen,
             "tau2": _tau2, "webshop": _native("webshop"), "reflexion_hotpotqa": _native("reflexion_hotpotqa")}


def export(out: Path, sets: tuple[str, ...] = tuple(SOURCES), root: Path | None = None) -> dict[str, int]:
    """Write ``out/<set>.jsonl`` for each set; returns the runs written per set."""
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for s in sets:
        if s not in EXPORTERS:
            raise InputError(f"unknown set {s!r}; valid: {', '.join(EXPORTERS)}", path="sets")
        n = 0
        tmp = out / f"{s}.jsonl.tmp"
        with tmp.open("w", encoding="utf-8") as f:
            for rec in EXPORTERS[s](Path(root or DEFAULT_ROOT)):
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
                n += 1
        tmp.replace(out / f"{s}.jsonl")
        counts[s] = n
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m model.data.export_first_week", description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path, help="folder for <set>.jsonl")
    ap.add_argument("--sets", default=",".join(SOURCES), help="comma-separated sets (default: all seven)")
    ap.add_argument("--root", type=Path, default=None, help="the vendored sets (default datasets/real)")
    a = ap.parse_args(argv)
    try:
        counts = export(a.out, tuple(s for s in a.sets.split(",") if s), a.root)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for s, n in counts.items():
        print(f"{s}: {n} runs → {a.out / (s + '.jsonl')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

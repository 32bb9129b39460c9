"""The real labelled agent runs vendored under ``datasets/real/``: one importer per set.

Each set's folder keeps its licence and README (source, commit, labels); the data is compressed as
it came. :func:`load_source` reads one set into :class:`RealRun` records: a :class:`~model.schema.Trace`
whose ``labels.failed`` says whether the run failed and, where the set says where it went wrong,
one failure label at that message (``source_index``), plus the group the run's splits must keep
together (its task or question: trials of one task are near-duplicates).

Reference answers, expected actions and reward details are **labels**: they decide ``failed`` and
the failing message, and never reach the trace a diagnosis reads.

============================  ======  ==============================  ===================================
set                           runs    failed                          where it went wrong
============================  ======  ==============================  ===================================
``tau_airline``               200     reward < 1 (116)                first write call that departs from
                                                                      the expected ones; else the last
                                                                      assistant message (see below)
``agentprocessbench``         200     final_label −1                  first −1 step label (message index)
``swe``                       500     not resolved (129)              — (run-level only)
``whowhen``                   126     all                             ``int(mistake_step)``, the agent
============================  ======  ==============================  ===================================

τ-bench's failing message is derived (its README): the first call to a write tool (book, cancel,
update, send certificate) whose name and arguments differ from the expected write action at the
same position; when every write call matches but one is missing (or all match, 3 runs), the last
assistant message. ``details.derived`` on the label says which rule gave it.

>>> runs = load_source("whowhen")          # doctest: +SKIP
>>> runs[0].failed, runs[0].trace.labels.failures[0].source_index   # doctest: +SKIP
(True, 5)
"""

from __future__ import annotations

import ast
import io
import json
import lzma
import re
import tarfile
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from model.errors import InputError
from model.importers import load_trace
from model.schema import FailureLabel, LabelSource, Step, StepKind, StepStatus, Trace, TraceLabels

DEFAULT_ROOT = Path(__file__).resolve().parent.parent / "datasets" / "real"

#: Set name → folder under the root. The order is the report's.
SOURCES: dict[str, str] = {
    "tau_airline": "tau_bench_airline",
    "agentprocessbench": "agentprocessbench_hotpotqa",
    "swe": "swe_mini_gemini3pro",
    "whowhen": "who_and_when_algorithm_generated",
}

#: The sets with successful and failed runs (run-level AUROC needs both).
RUN_LEVEL_SOURCES = ("tau_airline", "agentprocessbench", "swe")

TAU_WRITE_TOOLS = frozenset(
    {"book_reservation", "cancel_reservation", "update_reservation_flights", "update_reservation_baggages",
     "update_reservation_passengers", "send_certificate"}
)


_R = TypeVar("_R")


@dataclass(frozen=True)
class RealRun:
    """One real run: its trace (labels attached), the set, and the group its split keeps together."""

    source: str
    run_id: str
    group: str
    trace: Trace

    @property
    def failed(self) -> bool:
        assert self.trace.labels is not None and self.trace.labels.failed is not None
        return self.trace.labels.failed

    @property
    def fail_source_index(self) -> int | None:
        """The labelled failing message (``source_index``), when the set says where."""
        labels = self.trace.labels
        if labels is None or not labels.failures:
            return None
        return labels.failures[0].source_index

    @property
    def fail_speaker(self) -> str | None:
        labels = self.trace.labels
        return None if labels is None else labels.provenance.get("mistake_agent")


def _labels(failed: bool, source_index: int | None, trace: Trace, provenance: dict[str, Any]) -> TraceLabels:
    failures: list[FailureLabel] = []
    first_step = None
    if failed and source_index is not None:
        steps = [i for i, s in enumerate(trace.steps) if s.source_index == source_index]
        if not steps:  # a label on a message that made no step (an empty one): the next step after it
            steps = [i for i, s in enumerate(trace.steps) if s.source_index > source_index][:1]
        first_step = steps[0] if steps else None
        # These sets say where a run went wrong, not how: the label's kind stays unknown.
        failures.append(FailureLabel(kind=None, step=first_step, source_index=source_index, source=LabelSource.HUMAN))
    return TraceLabels(failed=failed, failures=failures, first_failing_step=first_step,
                       source=LabelSource.HUMAN, provenance=provenance)


def _read_xz(path: Path) -> bytes:
    try:
        return lzma.decompress(path.read_bytes())
    except (OSError, lzma.LZMAError) as exc:
        raise InputError(f"{path}: cannot read ({exc})", path=str(path)) from exc


def _tar_members(path: Path) -> Iterator[tuple[str, bytes]]:
    try:
        with tarfile.open(path, mode="r:xz") as tar:
            for m in tar:
                if m.isfile():
                    f = tar.extractfile(m)
                    if f is not None:
                        yield m.name, f.read()
    except (OSError, tarfile.TarError, lzma.LZMAError) as exc:
        raise InputError(f"{path}: cannot read ({exc})", path=str(path)) from exc


def _folder(root: Path, source: str) -> Path:
    folder = root / SOURCES[source]
    if not folder.is_dir():
        raise InputError(f"{folder}: no such folder (the vendored real runs live in datasets/real/)", path=str(folder))
    return folder


# ---- τ-bench airline ---------------------------------------------------------------------------


def _tau_calls(traj: list[dict[str, Any]]) -> list[tuple[int, str, Any]]:
    out = []
    for i, m in enumerate(traj):
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function") or {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                args = fn.get("arguments")
            out.append((i, str(fn.get("name")), args))
    return out


def tau_failing_message(traj: list[dict[str, Any]], expected: list[dict[str, Any]]) -> tuple[int | None, str]:
    """The derived failing message of a failed τ-bench run and the rule that gave it."""
    want = [(a["name"], a.get("kwargs", {})) for a in expected if a["name"] in TAU_WRITE_TOOLS]
    got = [(i, n, a) for i, n, a in _tau_calls(traj) if n in TAU_WRITE_TOOLS]
    for k, (i, name, args) in enumerate(got):
        if k >= len(want) or (name, args) != want[k]:
            return i, "departing_write_call"
    last = max((i for i, m in enumerate(traj) if m.get("role") == "assistant"), default=None)
    return last, "missing_write_call" if len(got) < len(want) else "all_calls_match"


def load_tau(root: Path) -> list[RealRun]:
    path = _folder(root, "tau_airline") / "gpt-4o-airline.json.xz"
    runs = []
    for r in json.loads(_read_xz(path)):
        failed = float(r["reward"]) < 1.0
        traj = r["traj"]
        trace = load_trace({"messages": traj}, format="openai")
        trace.id = f"tau_airline:{r['task_id']}:{r['trial']}"
        trace.task_type = "tau_airline"
        idx, rule = tau_failing_message(traj, r["info"]["task"].get("actions", [])) if failed else (None, "")
        trace.labels = _labels(failed, idx, trace, {"set": "tau_airline", "task_id": r["task_id"],
                                                    "trial": r["trial"], "derived": rule})
        runs.append(RealRun("tau_airline", trace.id, f"tau:{r['task_id']}", trace))
    return runs


# ---- AgentProcessBench HotpotQA ----------------------------------------------------------------


def _literal(value: Any) -> Any:
    """AgentProcessBench stores ``tool_calls`` and ``step_labels`` as Python reprs."""
    if isinstance(value, str):
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return json.loads(value)
    return value


def load_agentprocessbench(root: Path) -> list[RealRun]:
    folder = _folder(root, "agentprocessbench")
    runs = []
    for n, line in enumerate(_read_xz(folder / "hotpotqa.jsonl.xz").decode("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        r = json.loads(line)
        msgs = []
        for m in r["messages"]:
            m = dict(m)
            if m.get("tool_calls"):
                m["tool_calls"] = _literal(m["tool_calls"])
            msgs.append(m)
        final = int(r["final_label"])
        steps = {int(k): int(v) for k, v in _literal(r["step_labels"]).items()}
        failed = final == -1
        first_bad = min((k for k, v in steps.items() if v == -1), default=None)
        trace = load_trace({"messages": msgs}, format="openai")
        trace.id = f"agentprocessbench:{r['query_index']}:{r['sample_index']}"
        trace.task_type = "hotpotqa"
        trace.labels = _labels(failed, first_bad if failed else None, trace,
                               {"set": "agentprocessbench", "query_index": r["query_index"], "line": n})
        runs.append(RealRun("agentprocessbench", trace.id, f"apb:{r['query_index']}", trace))
    return runs


# ---- mini-SWE-agent ----------------------------------------------------------------------------

# mini-SWE-agent's own action pattern: one fenced ``bash`` block (other fences are the agent's prose)
_BASH = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
_RC = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
_SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def swe_trace(messages: list[dict[str, Any]], trace_id: str) -> Trace:
    """A mini-SWE-agent log as a trace: each fenced bash block is a ``bash`` call, the next user
    message its result (the return code kept in ``metadata``: non-zero is not by itself a failure);
    the output of the submit command is the run's final output (the patch)."""
    steps: list[Step] = []
    pending: str | None = None
    for i, m in enumerate(messages):
        role, text = m.get("role"), str(m.get("content") or "")
        if role == "system":
            steps.append(Step(kind=StepKind.SYSTEM, content=text, source_index=i))
        elif role == "assistant":
            blocks = _BASH.findall(text)
            thought = _BASH.sub("", text).strip()
            if thought or not blocks:
                steps.append(Step(kind=StepKind.LLM_OUTPUT, content=thought, source_index=i, speaker="agent"))
            if blocks:
                cmd = blocks[0].strip()
                pending = f"c{i}"
                steps.append(Step(kind=StepKind.TOOL_CALL, content=cmd, tool_name="bash",
                                  tool_args={"command": cmd}, call_id=pending, source_index=i, speaker="agent"))
        elif role == "user" and pending is not None:
            if _SUBMIT in (steps[-1].content if steps else ""):
                steps.append(Step(kind=StepKind.FINAL_OUTPUT, content=text, source_index=i, speaker="agent"))
            else:
                rc = _RC.search(text)
                steps.append(Step(kind=StepKind.TOOL_RESULT, content=text, tool_name="bash", call_id=pending,
                                  status=StepStatus.OK, source_index=i,
                                  metadata={"returncode": int(rc.group(1))} if rc else {}))
            pending = None
        else:
            steps.append(Step(kind=StepKind.USER_INPUT, content=text, source_index=i))
    return Trace(id=trace_id, steps=steps, task_type="swe")


def load_swe(root: Path) -> list[RealRun]:
    folder = _folder(root, "swe")
    summary = json.loads((folder / "results_summary.json").read_text(encoding="utf-8"))
    resolved = {r["instance_id"]: bool(r["resolved"]) for r in summary["instances"]}
    runs = []
    for name, data in _tar_members(folder / "trajs.tar.xz"):
        if not name.endswith(".traj.json"):
            continue
        traj = json.loads(data)
        iid = str(traj.get("instance_id") or Path(name).name.removesuffix(".traj.json"))
        if iid not in resolved:
            raise InputError(f"{name}: instance {iid!r} has no result in results_summary.json", path=name)
        trace = swe_trace(traj["messages"], f"swe:{iid}")
        failed = not resolved[iid]
        trace.labels = _labels(failed, None, trace, {"set": "swe", "instance_id": iid})
        runs.append(RealRun("swe", trace.id, f"swe:{iid}", trace))
    runs.sort(key=lambda r: r.run_id)
    return runs


# ---- Who&When ----------------------------------------------------------------------------------


def load_whowhen(root: Path) -> list[RealRun]:
    runs = []
    members = sorted(_tar_members(_folder(root, "whowhen") / "logs.tar.xz"),
                     key=lambda m: (len(m[0]), m[0]))
    for name, data in members:
        if not name.endswith(".json"):
            continue
        log = json.loads(io.BytesIO(data).read())
        trace = load_trace({"history": log["history"]}, format="openai")
        stem = Path(name).stem
        trace.id = f"whowhen:{stem}"
        trace.task_type = "whowhen"
        step = int(log["mistake_step"])
        trace.labels = _labels(True, step, trace, {"set": "whowhen", "file": name,
                                                   "mistake_agent": log.get("mistake_agent")})
        runs.append(RealRun("whowhen", trace.id, f"ww:{log.get('question_ID') or stem}", trace))
    return runs


def first_groups(runs: Sequence[_R], limit: int, *, source: str = "source", group: str = "group") -> list[_R]:
    """The runs of the first ``limit`` task groups of each set, in the sets' own order (a small,
    reproducible sample of :func:`model.realdata.load_all`'s runs for tests and notebooks)."""
    seen: dict[str, list[str]] = defaultdict(list)
    out = []
    for r in runs:
        s, g = getattr(r, source), getattr(r, group)
        if g not in seen[s]:
            if len(seen[s]) >= limit:
                continue
            seen[s].append(g)
        out.append(r)
    return out


_LOADERS = {"tau_airline": load_tau, "agentprocessbench": load_agentprocessbench, "swe": load_swe,
            "whowhen": load_whowhen}


def load_source(source: str, root: Path | None = None) -> list[RealRun]:
    """Every run of one set (see :data:`SOURCES`), traces labelled."""
    if source not in _LOADERS:
        raise InputError(f"unknown real set {source!r}; valid: {', '.join(SOURCES)}", path="source")
    return _LOADERS[source](Path(root or DEFAULT_ROOT))


def load_all(root: Path | None = None, sources: tuple[str, ...] | None = None) -> list[RealRun]:
    out: list[RealRun] = []
    for s in sources or tuple(SOURCES):
        out.extend(load_source(s, root))
    return out


__all__ = ["DEFAULT_ROOT", "first_groups", "RUN_LEVEL_SOURCES", "SOURCES", "RealRun", "load_all", "load_source",
           "swe_trace", "tau_failing_message"]

"""The real labelled agent runs vendored under ``datasets/real/``: one importer per set.

Each set's folder keeps its licence and README (source, commit, labels); the data is compressed as
it came. :func:`load_source` reads one set into :class:`RealRun` records: a :class:`~model.core.schema.Trace`
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
``tau2``                      200     reward 0 (75)                   — (run-level only)
``webshop``                   500     reward < 1 (321; see below)     — (run-level only)
``reflexion_hotpotqa``        100     not in CORRECT (66)             — (run-level only)
============================  ======  ==============================  ===================================

τ-bench's failing message is derived (its README): the first call to a write tool (book, cancel,
update, send certificate) whose name and arguments differ from the expected write action at the
same position; when every write call matches but one is missing (or all match, 3 runs), the last
assistant message. ``details.derived`` on the label says which rule gave it.

τ²-bench (``tau2``): airline and telecom, two models, telecom in two modes (with the simulated user,
and ``no-user`` where the agent works from a ticket). A trace is what the agent saw: the policy as
the system message (plus, solo, the ticket as the user's request), its own turns and calls, the
results of its calls, the user's text. The user's own phone-tool calls and their results (telecom)
are left out: tau2 never shows them to the agent. The telecom task id names the injected faults
(a label): it never reaches the trace; the run's id and group carry a hash of it, and the group is
the task across both models and both modes. τ²'s 20 airline tasks are τ-bench airline scenarios:
:data:`LOSO_FAMILY` holds ``tau_airline`` and ``tau2`` out together.

WebShop (``webshop``): parsed from the notebook's printed log. ``failed`` is reward < 1, as the
set's README says, so a purchase that matched most attributes (265 of the 321 failures are partial
rewards, median 0.6) counts as failed: a noisy label, kept as given and not re-thresholded (a
threshold chosen on these runs would be tuned on what they report). The reward itself stays in
``labels.provenance["reward"]`` only (an analysis may split full misses from partial ones); the
score page after ``click[Buy Now]`` and the running-mean line never reach the trace. The purchase
ends the episode: ``click[Buy Now]`` is the run's final answer (a ``final_output`` step); other
actions are ``search`` / ``click`` calls with the page as result (``Invalid action!`` an error
result), ``think[…]`` reasoning (the harness's ``OK.`` dropped).

Reflexion HotpotQA (``reflexion_hotpotqa``): the ReAct *base* runs, trial 1 of
``ReAct_base_100_questions_5_trials.txt`` (later trials re-run the failed questions only). The
question is the user's request, ``Thought`` reasoning, ``Search`` / ``Lookup`` calls with the
observation as result, ``Finish[answer]`` the final answer. The evaluator's verdict after
``Finish`` (``Answer is CORRECT`` / ``INCORRECT``) and the ``Correct answer:`` line are labels and
are dropped. The three agents printed under both INCORRECT and HALTED count once, as incorrect.

>>> runs = load_source("whowhen")          # doctest: +SKIP
>>> runs[0].failed, runs[0].trace.labels.failures[0].source_index   # doctest: +SKIP
(True, 5)
"""

from __future__ import annotations

import ast
import hashlib
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

from model.core.errors import InputError
from model.core.paths import REPO_ROOT
from model.core.schema import FailureLabel, LabelSource, Step, StepKind, StepStatus, Trace, TraceLabels
from model.importers import load_trace

DEFAULT_ROOT = REPO_ROOT / "datasets" / "real"

#: Set name → folder under the root. The order is the report's.
SOURCES: dict[str, str] = {
    "tau_airline": "tau_bench_airline",
    "agentprocessbench": "agentprocessbench_hotpotqa",
    "swe": "swe_mini_gemini3pro",
    "whowhen": "who_and_when_algorithm_generated",
    "tau2": "tau2_gym_gpt41",
    "webshop": "react_webshop",
    "reflexion_hotpotqa": "reflexion_hotpotqa_react",
}

#: The sets with successful and failed runs (run-level AUROC needs both).
RUN_LEVEL_SOURCES = ("tau_airline", "agentprocessbench", "swe", "tau2", "webshop", "reflexion_hotpotqa")

#: Set → the family held out together in leave-one-source-out: τ²'s airline tasks are τ-bench
#: airline scenarios, so a model "not trained on airline" must have seen neither.
LOSO_FAMILY: dict[str, str] = {s: s for s in SOURCES} | {"tau_airline": "airline", "tau2": "airline"}


def loso_family(source: str) -> str:
    """The leave-one-source-out family of a set (itself, but for the two airline sets)."""
    return LOSO_FAMILY.get(source, source)

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

# ---- τ²-bench airline + telecom ----------------------------------------------------------------

TAU2_FILES = {
    "gpt-4.1_airline_default_gpt-4.1_1trials.json.xz": ("gpt-4.1", "airline", "default"),
    "ft_gpt-4.1-2025-04-14_sierra_tau2-full-sft_BzrYdMNm_airline_default_gpt-4.1_1trials.json.xz":
        ("ft", "airline", "default"),
    "gpt-4.1_telecom_default_gpt-4.1_1trials.json.xz": ("gpt-4.1", "telecom", "default"),
    "ft_gpt-4.1-2025-04-14_sierra_tau2-full-sft_BzrYdMNm_telecom_default_gpt-4.1_1trials.json.xz":
        ("ft", "telecom", "default"),
    "gpt-4.1_telecom_no-user_gpt-4.1_1trials.json.xz": ("gpt-4.1", "telecom", "no-user"),
    "ft_gpt-4.1-2025-04-14_sierra_tau2-full-sft_BzrYdMNm_telecom_no-user_gpt-4.1_1trials.json.xz":
        ("ft", "telecom", "no-user"),
}


def label_hash(text: str) -> str:
    """A short stable hash of a label-bearing key (a telecom task id names its faults)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def tau2_messages(sim: dict[str, Any], policy: str, ticket: str | None) -> list[dict[str, Any]]:
    """A τ² simulation as the OpenAI chat the agent saw (see the module docstring)."""
    out: list[dict[str, Any]] = [{"role": "system", "content": policy}]
    if ticket is not None:
        out.append({"role": "user", "content": ticket})
    for m in sim["messages"]:
        role = m.get("role")
        if role == "tool":
            if m.get("requestor") == "user":
                continue  # the user's phone tools: never shown to the agent
            out.append({"role": "tool", "tool_call_id": m.get("id"), "content": m.get("content") or ""})
        elif role == "user":
            if m.get("content"):
                out.append({"role": "user", "content": m["content"]})
        elif role == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": m.get("content")}
            calls = [c for c in m.get("tool_calls") or [] if c.get("requestor", "assistant") == "assistant"]
            if calls:
                msg["tool_calls"] = [{"id": c["id"], "type": "function",
                                      "function": {"name": c["name"],
                                                   "arguments": json.dumps(c.get("arguments") or {})}}
                                     for c in calls]
            out.append(msg)
        else:
            raise InputError(f"tau2: message role {role!r} not understood", path="messages.role")
    return out


def load_tau2(root: Path) -> list[RealRun]:
    folder = _folder(root, "tau2")
    runs = []
    for name, (model, domain, mode) in TAU2_FILES.items():
        data = json.loads(_read_xz(folder / name))
        policy = str(data["info"]["environment_info"]["policy"])
        tickets = {t["id"]: t.get("ticket") for t in data["tasks"]}
        for sim in data["simulations"]:
            task = label_hash(f"{domain}\x00{sim['task_id']}")
            ticket = tickets.get(sim["task_id"]) if mode == "no-user" else None
            trace = load_trace({"messages": tau2_messages(sim, policy, ticket)}, format="openai")
            trace.id = f"tau2:{domain}:{mode}:{model}:{task}"
            trace.task_type = f"tau2_{domain}"
            reward = float(sim["reward_info"]["reward"])
            trace.labels = _labels(reward < 1.0, None, trace, {
                "set": "tau2", "domain": domain, "mode": mode, "model": model, "task": task,
                "reward": reward, "termination_reason": sim.get("termination_reason")})
            runs.append(RealRun("tau2", trace.id, f"tau2:{domain}:{task}", trace))
    return runs


# ---- ReAct WebShop -----------------------------------------------------------------------------

_WS_EPISODE = re.compile(r"-----------------\n(\d+)\n(.*?)\n(\d+) (\S+) (\S+) (\S+)\n-------------\n", re.DOTALL)
_WS_ACTION = re.compile(r"^Action: ", re.MULTILINE)
_WS_VERB = re.compile(r"^(\w+)\[(.*?)\]?$", re.DOTALL)


def webshop_trace(body: str, trace_id: str) -> Trace:
    """One printed WebShop episode (its ``Action: …`` / ``Observation: …`` turns) as a trace."""
    turns = [t for t in _WS_ACTION.split(body) if t.strip()]
    steps: list[Step] = []
    for n, turn in enumerate(turns):
        action, sep, obs = turn.partition("\nObservation:")
        if not sep:
            raise InputError(f"{trace_id}: turn {n} has no observation", path="turn")
        action, obs = action.strip(), obs.strip("\n").strip()
        idx = 2 * n  # the action's element; its observation is 2n + 1 (the reset's page is 1)
        if n == 0:
            if action != "reset":
                raise InputError(f"{trace_id}: the first action is {action!r}, not reset", path="action")
            steps.append(Step(kind=StepKind.USER_INPUT, content=obs, source_index=1))
            continue
        m = _WS_VERB.match(action)
        verb, arg = (m.group(1), m.group(2)) if m else ("invalid", action)
        if verb == "think":
            steps.append(Step(kind=StepKind.LLM_REASONING, content=arg, source_index=idx, speaker="agent"))
        elif verb == "click" and arg == "Buy Now" and obs != "Invalid action!":
            # the purchase ends the episode: the run's answer; the score page after it is a label
            # (a ``Buy Now`` clicked where there is none is an invalid action: the run goes on)
            steps.append(Step(kind=StepKind.FINAL_OUTPUT, content=action, source_index=idx, speaker="agent"))
            break
        else:
            cid = f"a{n}"
            steps.append(Step(kind=StepKind.TOOL_CALL, content=action, tool_name=verb,
                              tool_args={"query": arg} if verb == "search" else {"target": arg},
                              call_id=cid, source_index=idx, speaker="agent"))
            bad = obs == "Invalid action!"
            steps.append(Step(kind=StepKind.TOOL_RESULT, content=obs, tool_name=verb, call_id=cid,
                              status=StepStatus.ERROR if bad else StepStatus.OK, source_index=idx + 1))
    return Trace(id=trace_id, steps=steps, task_type="webshop")


def load_webshop(root: Path) -> list[RealRun]:
    nb = json.loads(_read_xz(_folder(root, "webshop") / "WebShop.ipynb.xz"))
    log = "".join("".join(o.get("text", "")) for o in nb["cells"][7]["outputs"] if o.get("name") == "stdout")
    runs: list[RealRun] = []
    prev_mean = 0.0
    for m in _WS_EPISODE.finditer(log):
        i, body, mean = int(m.group(1)), m.group(2), float(m.group(4))
        if int(m.group(3)) != i + 1 or i != len(runs):
            raise InputError(f"webshop: episode {i} out of order", path="episode")
        reward = round((i + 1) * mean - i * prev_mean, 6)
        prev_mean = mean
        trace = webshop_trace(body, f"webshop:fixed_{i}")
        trace.labels = _labels(reward < 1.0, None, trace, {"set": "webshop", "goal": f"fixed_{i}", "reward": reward})
        runs.append(RealRun("webshop", trace.id, f"webshop:fixed_{i}", trace))
    if len(runs) != 500:
        raise InputError(f"webshop: {len(runs)} episodes parsed, expected 500", path="WebShop.ipynb")
    return runs


# ---- ReAct HotpotQA (Reflexion repo) -----------------------------------------------------------

_RX_LINE = re.compile(r"^(Thought|Action|Observation) (\d+): ?(.*)$")
_RX_ACTION = re.compile(r"^(\w+)\[(.*)\]$", re.DOTALL)


def reflexion_trace(agent: str, trace_id: str) -> tuple[Trace, str]:
    """One ReAct agent's printed block (``Question:`` … ``Correct answer:``) as a trace, and its question.

    The observation after ``Finish`` (the evaluator's verdict) and ``Correct answer:`` are dropped.
    """
    lines = agent.strip("\n").split("\n")
    if not lines[0].startswith("Question: "):
        raise InputError(f"{trace_id}: an agent must start with 'Question: '", path="Question")
    question = lines[0].removeprefix("Question: ").strip()
    items: list[list[str]] = []  # [kind, text]
    for line in lines[1:]:
        if line.startswith("Correct answer:"):
            break
        m = _RX_LINE.match(line)
        if m:
            items.append([m.group(1), m.group(3)])
        elif items:
            items[-1][1] += "\n" + line  # a Wikipedia paragraph running over lines
        else:
            question += "\n" + line
    steps = [Step(kind=StepKind.USER_INPUT, content=question, source_index=0)]
    pending: str | None = None
    finished = False
    for n, (kind, text) in enumerate(items, 1):
        text = text.strip()
        if kind == "Thought":
            steps.append(Step(kind=StepKind.LLM_REASONING, content=text, source_index=n, speaker="agent"))
        elif kind == "Action":
            m = _RX_ACTION.match(text)
            verb, arg = (m.group(1), m.group(2)) if m else ("invalid", text)
            if verb == "Finish":
                steps.append(Step(kind=StepKind.FINAL_OUTPUT, content=arg, source_index=n, speaker="agent"))
                finished = True
                pending = None
            else:
                pending = f"a{n}"
                steps.append(Step(kind=StepKind.TOOL_CALL, content=text, tool_name=verb.lower(),
                                  tool_args={"query": arg}, call_id=pending, source_index=n, speaker="agent"))
        elif finished:
            break  # the evaluator's verdict on Finish: a label
        else:
            bad = text.startswith("Invalid Action")
            steps.append(Step(kind=StepKind.TOOL_RESULT, content=text, call_id=pending,
                              tool_name=next((s.tool_name for s in reversed(steps) if s.call_id == pending), None),
                              status=StepStatus.ERROR if bad else StepStatus.OK, source_index=n))
            pending = None
    return Trace(id=trace_id, steps=steps, task_type="hotpotqa"), question


_RX_BLOCK = re.compile(r"-+ BEGIN (CORRECT|INCORRECT|HALTED) AGENTS -+\n")


def load_reflexion(root: Path) -> list[RealRun]:
    text = _read_xz(_folder(root, "reflexion_hotpotqa") / "ReAct_base_100_questions_5_trials.txt.xz").decode("utf-8")
    start, end = text.find("BEGIN TRIAL 1\n"), text.find("BEGIN TRIAL 2\n")
    if start < 0 or end < 0:
        raise InputError("reflexion_hotpotqa: no BEGIN TRIAL 1 / 2 in the base log", path="BEGIN TRIAL")
    parts = _RX_BLOCK.split(text[start:end])
    runs: list[RealRun] = []
    seen: dict[str, str] = {}  # agent text → its block
    for block, body in zip(parts[1::2], parts[2::2], strict=True):
        for agent in re.split(r"\n(?=Question: )", body):
            agent = agent.strip("\n#")
            if not agent.startswith("Question: "):
                continue
            if agent in seen:  # printed under INCORRECT and again under HALTED: once, as incorrect
                continue
            seen[agent] = block
            q = agent.split("\n", 1)[0]
            key = label_hash(q)
            trace, _ = reflexion_trace(agent, f"reflexion_hotpotqa:{key}")
            trace.labels = _labels(block != "CORRECT", None, trace,
                                   {"set": "reflexion_hotpotqa", "outcome": block.lower()})
            runs.append(RealRun("reflexion_hotpotqa", trace.id, f"rx:{key}", trace))
    return runs


def first_groups(runs: Sequence[_R], limit: int, *, source: str = "source", group: str = "group") -> list[_R]:
    """The runs of the first ``limit`` task groups of each set, in the sets' own order (a small,
    reproducible sample of :func:`model.data.realdata.load_all`'s runs for tests and notebooks)."""
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
            "whowhen": load_whowhen, "tau2": load_tau2, "webshop": load_webshop, "reflexion_hotpotqa": load_reflexion}


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


__all__ = ["DEFAULT_ROOT", "LOSO_FAMILY", "first_groups", "label_hash", "loso_family", "RUN_LEVEL_SOURCES",
           "SOURCES", "RealRun", "load_all", "load_source", "reflexion_trace", "swe_trace", "tau2_messages",
           "tau_failing_message", "webshop_trace"]

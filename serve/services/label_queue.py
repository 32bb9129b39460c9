"""The label queue: which stored run to label next, and what labelling it writes.

Its doors: ``triage label review --from-store`` (the terminal loop, :mod:`serve.cli.label_review`)
and the console's Label queue page (:mod:`serve.routers.ui_queue`); both read the stored runs and
write labels through the services (:class:`serve.services.console.ConsoleService`,
:class:`serve.services.triage.TriageService`). The study of the ``queue`` order against random order
is :mod:`model.training.agentmodel.queue` (``python -m model.training.agentmodel.queue``).
``triage label review FILE`` (a labelled data set's weak labels) uses the same keys and compact view
(:func:`file_review_queue`, :func:`compact`).

**Which traces first.** A stored diagnosis decides its verdict twice: the run scorer's
``failure_probability`` against the operating point (the tenant's relative one for the trace's task
type when the service has one, else the scorer's fixed one: the one it was judged at when the
run was flagged, since the ``runscore`` failure keeps it in ``details.threshold``; otherwise the
stored response does not keep it, and it is the operating point as of now), and each finding's
confidence against its kind's threshold (:data:`model.diagnosis.diagnoser.DEFAULT_THRESHOLDS`, 0.5). A
trace's **margin** is the smallest of those distances: ``|p − operating point|`` and
``|confidence − threshold|`` over its failures and signals. A trace with neither a probability nor a
finding has margin 1. Three orders (``--order``):

* ``random`` — a random order, each reviewer's (the author's) own part of one (:func:`random_order`): every
  run has a place in it (the sha256 of its id, ``traces.review_key``) and a reviewer walks it from
  their own start (the sha256 of the author) round to it again. Stable across pages and sessions, so
  a page shows the same run until it is labelled, and a label removes its run without reshuffling the
  rest; two reviewers start at different places, so they do not label the same runs at the same
  time (their orders are rotations of one another: since revision 0018, read from an index; before,
  each pair's own hash, sorted over every run);
* ``margin`` — smallest margin first (newest first among equals);
* ``queue`` — :func:`model.training.agentmodel.queue.order_queue`: the uncertainty ``1 − 2·margin`` divided by
  one plus the runs of the trace's near-duplicate cluster (its ``metadata.task_id``, else its opening
  request: :func:`model.training.agentmodel.cv.group_runs`) already labelled or placed earlier, so that
  near-duplicate runs of one task count once.

:data:`DEFAULT_ORDER` is the one the measurement chose (reports/learning.md, "The review queue against
random order"; docs/retraining.md, "Which runs to label"): random order unless an order's interval
over random is above 0 at K = 50.

**What it writes.** Every key that saves calls :meth:`serve.services.triage.TriageService.add_label`, the
method behind ``POST /v1/traces/{id}/labels``: the same rows, the same checks, the same effective
label (:mod:`serve.services.run_labels`). The author is ``cli:<user>`` unless given, ``author_type``
``human``.

``a`` (agree) takes the stored verdict: healthy → ok; failed → failed at the primary failure's step,
with its kind unless the run scorer raised it (its kind is named from the attributed step's shape).

``u`` (undo) withdraws the reviewer's newest label (:meth:`serve.services.triage.TriageService.undo_label`,
the method behind ``POST /v1/labels/undo``: the row is kept, marked withdrawn) and goes back to that
trace when it was labelled in this session; a label from an earlier session is withdrawn and its
trace comes back in the next run's queue.

**Resumable.** Traces that already carry a label by this author are left out of the queue, so
quitting (or the end of the input) and running it again carries on where it stopped; ``skip``
leaves a trace for next time.

The terminal loop is :func:`serve.cli.label_review.run_review`; the console's page is
:func:`queue_page`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args, runtime_checkable

from model.core.errors import InputError, ModelLoadError
from model.core.kinds import FailureKind
from model.core.schema import LabelSource, Trace
from model.scoring.agent_registry import ZERO_SHOT
from serve.services.console import ConsoleService, version_cv_auroc
from serve.store.labels import ReviewRow
from serve.store.verdict import closest_finding, queue_key, run_columns

if TYPE_CHECKING:
    from model.scoring.runscore.model import RunScorer
    from serve.services.triage import TriageService

#: The review's orders (module docstring); ``random`` is the reference the others are measured against.
Order = Literal["random", "margin", "queue"]
ORDERS: tuple[Order, ...] = get_args(Order)
#: Each order in a few words (the console's titles).
ORDER_TITLES: dict[str, str] = {
    "random": "a random order seeded by you: stable across pages",
    "margin": "the stored diagnoses closest to deciding the other way first",
    "queue": "uncertain first, the runs of one task counted once",
}
#: The review's default order: the measured best at K = 50 (``model.training.agentmodel.queue.measured_best``
#: on reports/learning.json's queue section; tests/test_queue.py checks the two agree).
DEFAULT_ORDER: Order = "random"

#: The review's keys (the CLI's and the console's; ``u``: undo).
MAIN_KEYS = "foaksnuq"
MAIN_PROMPT = ("  [f] failed  [o] ok  [a] agree with the diagnosis  [k] kind  [s] step  [n] skip  [u] undo  "
               "[q] quit: ")

#: One key per failure kind (the legend the review shows).
KIND_KEYS: dict[str, FailureKind] = {
    "t": FailureKind.TOOL_ERROR, "o": FailureKind.TIMEOUT, "r": FailureKind.RATE_LIMITED,
    "p": FailureKind.PROVIDER_ERROR, "m": FailureKind.MALFORMED_CALL, "e": FailureKind.EMPTY_RESPONSE,
    "i": FailureKind.INCOMPLETE, "f": FailureKind.REFUSAL, "l": FailureKind.LOOP, "g": FailureKind.IGNORED_ERROR,
    "h": FailureKind.HALLUCINATION, "x": FailureKind.OFF_TOPIC, "c": FailureKind.CONTEXT_LOSS,
    "v": FailureKind.ASSUMPTION_VIOLATED, "d": FailureKind.DISALLOWED_TOOL, "u": FailureKind.UNSAFE_OUTPUT,
}


def legend() -> str:
    """The kind keys, as the review shows them."""
    return "  ".join(f"{k}={v.value}" for k, v in KIND_KEYS.items())


def needs_review(t: Trace, *, everything: bool = False) -> bool:
    """A trace the reviewer should see: weak labels flagged uncertain (or any non-human trace with
    ``everything``)."""
    if t.labels is None:
        return everything
    if t.labels.source is LabelSource.HUMAN:
        return False
    if everything:
        return True
    return t.labels.source is LabelSource.RULE_VOTE and bool(t.labels.provenance.get("review"))


def file_review_queue(traces: list[Trace], done: set[str], *, everything: bool = False) -> list[Trace]:
    """The traces still to review, in file order (``done``: ids that already have a human label)."""
    return [t for t in traces if t.id not in done and needs_review(t, everything=everything)]


def compact(t: Trace, width: int = 110, marks: set[int] | None = None) -> str:
    """One line per step: index, kind, speaker/tool, status, the start of the content; ``*`` marks
    the steps in ``marks`` (default: the steps of the trace's labelled failures)."""
    if marks is None:
        marks = {f.step for f in t.labels.failures if f.step is not None} if t.labels else set()
    lines = []
    for i, s in enumerate(t.steps):
        who = s.tool_name or s.speaker or ""
        st = f" [{s.status.value}]" if s.status and s.status.value != "ok" else ""
        body = s.content
        if s.kind.value == "tool_call":
            body = s.tool_args_raw or ""
        body = " ".join(body.split())
        head = f"{'*' if i in marks else ' '}{i:3d} {s.kind.value:<12} {who[:18]:<18}{st} "
        room = max(10, width - len(head))
        lines.append(head + (body[:room] + "…" if len(body) > room else body))
    return "\n".join(lines)


@dataclass(frozen=True)
class Measure:
    """What a trace's margin is measured on: ``on`` (``"failure probability"``, or the kind of the
    finding whose confidence it is), its ``value`` and the ``threshold`` it is set against (the
    operating point for the probability); ``on`` is ``None`` when there is nothing to measure."""

    on: str | None
    value: float | None = None
    threshold: float | None = None

    def text(self) -> str:
        """The CLI's header words for it."""
        if self.on is None or self.value is None or self.threshold is None:
            return "nothing to measure (no failure probability, no finding)"
        if self.on == PROBABILITY:
            return f"failure probability {self.value:.4f} vs operating point {self.threshold:.4f}"
        return f"{self.on} confidence {self.value:.4f} vs its threshold {self.threshold:.2f}"


PROBABILITY = "failure probability"


@dataclass(frozen=True)
class Candidate:
    """One stored trace in the review queue (the trace itself is read when it is shown)."""

    trace_id: str
    created_at: datetime
    margin: float
    basis: str  # what the margin is measured on, for the header line
    response: dict[str, Any]
    measure: Measure = Measure(None)  # the same, as figures (the console words them itself)


def margin(response: dict[str, Any], threshold: float | None) -> tuple[float, str]:
    """How close a stored diagnosis sits to deciding the other way, and on what (module docstring).

    >>> margin({"failure_probability": 0.40, "failures": [], "signals": []}, 0.45)[0]
    0.04999999999999999
    """
    best, measured = measure_margin(response, threshold)
    return best, measured.text()


def measure_margin(response: dict[str, Any], threshold: float | None) -> tuple[float, Measure]:
    """:func:`margin` with what it measured as figures (:class:`Measure`)."""
    cols = run_columns(response)
    best, measured = margin_of(cols["failure_probability"], cols["judged_threshold"], cols["finding_margin"],
                               threshold)
    return best, measured or _finding_measure(response)


def _finding_measure(response: dict[str, Any]) -> Measure:
    """What the margin measures when a finding's confidence is the closest to its threshold
    (:func:`serve.store.verdict.closest_finding`), ``Measure(None)`` without one."""
    near = closest_finding(response)
    return Measure(near[1], near[2], near[3]) if near is not None else Measure(None)


def _row_measure(r: ReviewRow, threshold: float | None, found: dict[str, list[dict[str, Any]]]) -> tuple[float, Measure]:
    """:func:`margin_of` of a row's columns with its :class:`Measure`: the probability's, else the closest
    finding's, read from the run's failure rows (``found``: :meth:`serve.store.labels.LabelStore.findings_of`)."""
    m, said = margin_of(r.failure_probability, r.judged_threshold, r.finding_margin, threshold)
    return m, said or _finding_measure({"failures": found.get(r.trace_id, [])})


def margin_of(p: float | None, judged: float | None, finding: float | None,
              threshold: float | None) -> tuple[float, Measure | None]:
    """The margin of a run from its stored columns (:func:`serve.store.verdict.run_columns`): the
    probability's distance to its operating point (``judged``, else ``threshold``, else 0.5) unless a
    finding sits strictly closer to its threshold; 1 with neither. The :class:`Measure` when it is the
    probability's, ``None`` when a finding's (or nothing's)."""
    best, measured = 1.0, None
    if p is not None:
        thr = judged if judged is not None else 0.5 if threshold is None else threshold
        best = abs(p - thr)
        measured = Measure(PROBABILITY, p, thr)
    if finding is not None and finding < best:
        return finding, None
    return best, measured


class HistorySource(Protocol):
    """What the queue reads: the tenant's stored runs, each a dict with ``trace``, ``response``,
    ``created_at``, ``agent`` and ``labels`` (:meth:`serve.store.labels.LabelStore.iter_history`,
    :meth:`serve.services.console.ConsoleService.iter_history`)."""

    def iter_history(self, tenant: str) -> Iterable[dict[str, Any]]: ...


def random_order(author: str) -> Callable[[str], tuple[int, int, str]]:
    """The ``random`` order's sort key of a run's id for a reviewer (module docstring): its place in
    the one random order (:func:`serve.store.verdict.queue_key` of the id, ``traces.review_key``)
    counted from the reviewer's start (``queue_key`` of the author) round to it again, then the id."""
    start = queue_key(author)

    def key(trace_id: str) -> tuple[int, int, str]:
        k = queue_key(trace_id)
        return (k < start, k, trace_id)  # from the start up, then round from the lowest key to it

    return key


def random_key(author: str, trace_id: str) -> tuple[int, int, str]:
    """:func:`random_order`'s key of one run.

    >>> random_key("ana", "t1") == random_key("ana", "t1") != random_key("bob", "t1")
    True
    """
    return random_order(author)(trace_id)


@runtime_checkable
class IndexedHistory(Protocol):
    """A history the queue orders from the console's index (:meth:`serve.store.labels.LabelStore.review_rows`),
    reading the stored responses of the candidates it shows only."""

    def review_rows(self, tenant: str, author: str) -> tuple[list[ReviewRow], int]: ...

    def responses(self, tenant: str, trace_ids: Sequence[str]) -> dict[str, dict[str, Any]]: ...

    def findings_of(self, tenant: str, trace_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]: ...


def review_queue(
    store: HistorySource, tenant: str, *, author: str, threshold_for: Callable[[str | None], float | None],
    order: str = DEFAULT_ORDER, detail: int | None = None,
) -> tuple[list[Candidate], int]:
    """The tenant's traces still to review by ``author``, in ``order`` (module docstring), and how
    many that author has labelled already. ``threshold_for(agent)`` gives the operating point of the
    run's agent (``traces.agent``).

    From a store that keeps the console's index (:class:`IndexedHistory`), the ``random`` and
    ``margin`` orders read it, not the stored traces. ``detail`` (a page's): the candidates carry no
    stored ``response`` (``{}``), and only the first ``detail`` their :class:`Measure` (the others
    ``Measure(None)``); ``None``: every candidate carries both. The ``queue`` order clusters the runs'
    texts: it reads every trace."""
    if order not in ORDERS:
        raise InputError(f"order must be one of {', '.join(ORDERS)}; got {order!r}", path="order")
    if order != "queue" and isinstance(store, IndexedHistory):
        return _indexed_queue(store, tenant, author=author, threshold_for=threshold_for, order=order,
                              detail=detail)
    queue: list[Candidate] = []
    done = 0
    cache: dict[str | None, float | None] = {}
    traces: list[dict[str, Any]] = []  # every stored trace (the clusters), queue ones first
    labelled: list[dict[str, Any]] = []
    for record in store.iter_history(tenant):
        if record["labels"]:
            labelled.append(record["trace"])
        if any((row.get("author") or "") == author for row in record["labels"]):
            done += 1
            continue
        response = record["response"] or {}
        agent = record.get("agent")
        if agent not in cache:
            cache[agent] = threshold_for(agent)
        m, measured = measure_margin(response, cache[agent])
        queue.append(Candidate(str(record["trace"]["id"]), record["created_at"], m, measured.text(), response,
                               measured))
        traces.append(record["trace"])
    # random; else by margin (also the queue order's starting order)
    order_by = _ordered(order, author, [(c.trace_id, c.margin, c.created_at) for c in queue])
    if order == "queue" and queue:
        # the clustering and the order are the study's (model/training/agentmodel), imported when used
        from model.training.agentmodel.cv import group_runs
        from model.training.agentmodel.queue import order_queue

        every = [Trace.model_validate(t) for t in [traces[i] for i in order_by] + labelled]
        tasks = [t.metadata.get("task_id") for t in every]
        clusters = group_runs(every, [None if x is None else str(x) for x in tasks])
        n = len(order_by)
        counts: dict[str, int] = {}
        for c in clusters[n:]:
            counts[c] = counts.get(c, 0) + 1
        value = [max(0.0, 1.0 - 2.0 * queue[i].margin) for i in order_by]
        order_by = [order_by[j] for j in order_queue(None, clusters[:n], labelled=counts, value=value)]
    return [queue[i] for i in order_by], done


def _ordered(order: str, author: str, runs: Sequence[tuple[str, float, datetime]]) -> list[int]:
    """The positions of ``runs`` (id, margin, created) in ``order``: ``random`` (:func:`random_order`
    of the author), else smallest margin first, newest first among equals, then by id."""
    if order == "random":
        rnd = random_order(author)
        return sorted(range(len(runs)), key=lambda i: rnd(runs[i][0]))
    return sorted(range(len(runs)), key=lambda i: (runs[i][1], -runs[i][2].timestamp(), runs[i][0]))


def _indexed_queue(
    store: IndexedHistory, tenant: str, *, author: str, threshold_for: Callable[[str | None], float | None],
    order: str, detail: int | None,
) -> tuple[list[Candidate], int]:
    """:func:`review_queue`'s ``random`` and ``margin`` orders from the console's index: the same
    candidates in the same order as the walk over every trace."""
    rows, done = store.review_rows(tenant, author)
    cache: dict[str | None, float | None] = {}
    margins = []
    for r in rows:
        if r.agent not in cache:
            cache[r.agent] = threshold_for(r.agent)
        margins.append(margin_of(r.failure_probability, r.judged_threshold, r.finding_margin, cache[r.agent])[0])
    order_by = _ordered(order, author, [(r.trace_id, m, r.created_at) for r, m in zip(rows, margins, strict=True)])
    if detail is None:  # every candidate with its stored response (the terminal review shows each)
        responses = store.responses(tenant, [r.trace_id for r in rows])
        out = []
        for i in order_by:
            r = rows[i]
            response = responses.get(r.trace_id, {})
            m, got = measure_margin(response, cache[r.agent])
            out.append(Candidate(r.trace_id, r.created_at, m, got.text(), response, got))
        return out, done
    # the page's head: the words of the margin from the columns, or from the failure rows when a
    # finding's confidence is the closest (the failure rows keep the response's order)
    head = [rows[i] for i in order_by[:detail]]
    found = store.findings_of(tenant, [r.trace_id for r in head
                                       if margin_of(r.failure_probability, r.judged_threshold, r.finding_margin,
                                                    cache[r.agent])[1] is None])
    out = []
    for n, i in enumerate(order_by):
        r = rows[i]
        said = _row_measure(r, cache[r.agent], found)[1] if n < detail else Measure(None)
        out.append(Candidate(r.trace_id, r.created_at, margins[i], said.text(), {}, said))
    return out, done


def queue_head(
    console: ConsoleService, tenant: str, *, author: str, threshold_for: Callable[[str | None], float | None],
    order: str, size: int,
) -> tuple[list[Candidate], int, int]:
    """The first ``size`` candidates of :func:`review_queue` (without responses, with their
    :class:`Measure`), how many are left in the whole queue and how many the author labelled: what a
    page shows. The ``random`` and ``margin`` orders are ordered by the database over the console's
    index (:meth:`serve.store.labels.LabelStore.review_head`); the ``queue`` order, and any order while
    the verdict backfill has rows to fill, by :func:`review_queue`."""
    if order in ("random", "margin"):
        # each agent's operating point (0.5 where it has none, as margin_of takes it)
        thresholds = {a: 0.5 if (thr := threshold_for(a)) is None else thr for a in console.agents(tenant)}
        got = console.review_head(tenant, author, order=order, thresholds=thresholds, default=0.5, limit=size)
        if got is not None:
            rows, left, done = got
            cache = {a: thresholds.get(a) for a in {r.agent for r in rows}}
            out = []
            found = console.findings_of(tenant, [r.trace_id for r in rows])
            for r in rows:
                m, said = _row_measure(r, cache[r.agent], found)
                out.append(Candidate(r.trace_id, r.created_at, m, said.text(), {}, said))
            return out, left, done
    queue, done = review_queue(console, tenant, author=author, threshold_for=threshold_for, order=order, detail=size)
    return queue[:size], len(queue), done


def agree(response: dict[str, Any]) -> dict[str, Any] | str:
    """What ``a`` (agree) saves for a stored diagnosis (module docstring), or why it cannot (a message)."""
    healthy = response.get("healthy")
    if healthy is None:
        return "the diagnosis has no verdict (content not recorded): press f or o"
    if healthy:
        return {"failed": False}
    primary = response.get("primary") or {}
    kind = primary.get("kind")
    step = primary.get("step")
    if primary.get("detector") == "runscore":
        kind = None  # the run scorer names a kind from the attributed step's shape: a guess, not a finding
    return {"failed": True, "kind": kind if kind in {k.value for k in FailureKind} else None,
            "step": step if isinstance(step, int) else None}




def operating_points(service: TriageService, tenant: str,
                     scorer: RunScorer | None) -> Callable[[str | None], float | None]:
    """``threshold_for(agent)`` for :func:`review_queue`: the agent's relative threshold when the
    service has one (the agent's streams), else the run scorer's fixed one (``None`` without a scorer).
    The CLI and the console ask the same."""
    fixed = scorer.threshold if scorer is not None else None

    def threshold_for(agent: str | None) -> float | None:
        rel = service.relative_threshold(tenant, agent, scorer) if agent else None
        return rel if rel is not None else fixed

    return threshold_for


def author_of(key_id: str | None) -> str:
    """The author the API writes for a label posted with this key and no author: ``key:<id>``."""
    return f"key:{key_id}" if key_id else ""


def shown_steps(view: dict[str, Any], max_steps: int = 24) -> list[dict[str, Any]]:
    """The console's compact view of a long run (its run page's ``steps``), as the CLI's
    (:func:`serve.cli.label_review.render`): the first three steps, the last, and two either side of
    each failure and the attribution; a gap is a row ``{"gap": n}``."""
    steps = view["steps"]
    if len(steps) <= max_steps:
        return list(steps)
    marks = {s["index"] for s in steps if s["attributed"] or any(m["level"] == "failure" for m in s["marks"])}
    keep = set(range(3)) | {len(steps) - 1}
    for m in marks:
        keep |= set(range(max(0, m - 2), min(len(steps), m + 3)))
    shown: list[dict[str, Any]] = []
    last = -1
    for i in sorted(keep):
        if i > last + 1:
            shown.append({"gap": i - last - 1})
        shown.append(steps[i])
        last = i
    return shown


def active_cv_auroc(console: ConsoleService, tenant: str, agent: str | None) -> float | None:
    """The cross-validated AUROC of the agent's active registry version, when it has one."""
    if agent is None:
        return None
    try:
        version = console.active_model(tenant, agent)
        if version is None or version == ZERO_SHOT:
            return None
        mv = console.registry.get(tenant, agent, version)
    except (InputError, ModelLoadError):
        return None
    return version_cv_auroc(mv.summary)


def queue_page(console: ConsoleService, tenant: str, *, key_id: str | None, at: int,
               scorer: RunScorer | None, order: str = DEFAULT_ORDER) -> dict[str, Any]:
    """The console's Label queue page: the queue of this key's author (:func:`review_queue` in
    ``order``, :data:`DEFAULT_ORDER` unless the page asks), the run at position ``at`` (its run page's view, with why it is asked and what
    ``a`` saves), the keys, and the run's agent's labelled runs and model."""
    author = author_of(key_id)
    if order not in ORDERS:
        raise InputError(f"order must be one of {', '.join(ORDERS)}; got {order!r}", path="order")
    queue, left, done = queue_head(console, tenant, author=author,
                                   threshold_for=operating_points(console.service, tenant, scorer), order=order,
                                   size=max(200, at + 1))
    total = done + left
    current = None
    if queue:
        at = min(at, len(queue) - 1)
        c = queue[at]
        current = console.run(tenant, c.trace_id)
        current["margin"] = round(c.margin, 6)
        # why it is asked: what the margin is measured on (the probability or a finding's confidence) and against what
        current["uncertainty"] = {"on": c.measure.on, "value": c.measure.value, "threshold": c.measure.threshold,
                                  "text": c.basis}
        # what [a] saves, or why it cannot (from the run's stored diagnosis, as its page shows it)
        current["agree"] = agree({"healthy": current["healthy"], "primary": current["primary"]})
        current["shown"] = shown_steps(current)
    agent = current["agent"] if current else None
    labelled = console.labelled_count(tenant, agent)
    basis = (current or {}).get("basis") or {}
    cv_auroc = basis.get("cv_auroc") if isinstance(basis.get("cv_auroc"), int | float) else \
        active_cv_auroc(console, tenant, agent)
    return {
        "author": author, "done": done, "total": total, "left": left, "at": at, "order": order,
        "orders": list(ORDERS), "order_titles": ORDER_TITLES,
        "default_order": DEFAULT_ORDER,
        "queue": [{"id": c.trace_id, "margin": round(c.margin, 4), "basis": c.basis} for c in queue[:200]],
        "current": current, "main_keys": MAIN_KEYS,  # the CLI's keys, u (undo) among them
        "kind_keys": {k: v.value for k, v in KIND_KEYS.items()},
        # the run's agent (traces.agent) and its labelled runs in the store; the run's basis: which
        # model scored it and on how many labelled runs that model learned
        "agent": agent, "agent_labelled": labelled, "basis_model": basis.get("model"),
        "basis_labelled": basis.get("labelled_runs"),
        "cv_auroc": cv_auroc, "retrain": f"triage retrain --tenant {tenant}" + (
            f" --agent {agent}" if agent is not None else ""),
    }


__all__ = ["DEFAULT_ORDER", "KIND_KEYS", "MAIN_KEYS", "MAIN_PROMPT", "ORDERS", "ORDER_TITLES", "Order", "PROBABILITY", "Candidate",
           "HistorySource", "IndexedHistory", "Measure", "active_cv_auroc", "agree", "author_of", "compact", "file_review_queue",
           "legend", "margin", "margin_of", "measure_margin", "needs_review", "operating_points", "queue_head", "queue_page", "random_key", "random_order",
           "review_queue", "shown_steps"]

"""The canary share: repair for X % of sessions, shadow for the rest, and the figures per arm.

A team that wants to know whether following the recommendations helps *its* agent sets
``TRIAGE_REPAIR_CANARY_PERCENT`` (say 20): a fifth of its sessions get recommendations to carry
out (the **repair** arm), the others are diagnosed and recorded but told ``continue`` (the
**shadow** arm, exactly what ``options.shadow`` does). ``/metrics`` then shows both arms side by
side on the same traffic (:class:`CanaryCollector`).

Assignment
    :func:`assign_arm` hashes tenant and session id (SHA-256, not Python's per-process ``hash``),
    so every worker, replica and restart puts a session in the same arm. The bucket is one of
    10,000; a session is in the repair arm when its bucket is below ``percent × 100``, so raising
    the percent only moves shadow sessions into repair, never back. A trace sent without a session
    id is its own session (``trace:<id>``). The arm a session got on its first diagnosis is kept
    in its repair state, so changing the percent mid-run does not switch a running session.

    A session whose caller asks for shadow itself (``options.shadow: true``) is told ``continue``
    whatever its arm, is answered ``arm: "shadow"`` and counts in neither arm: the canary did not
    choose it, and comparing it with the arms would mix in whatever made the caller choose.

The figures per arm (over the runs the tenant started in the window, ``TRIAGE_CANARY_WINDOW``,
default 7 days, counted from the top of the hour it began in; a run = a session or a sessionless
trace; its later diagnoses, labels and outcomes count with it)
    runs
        runs assigned to the arm;
    failure rate
        runs in which some diagnosis found a failure / runs (the arms should agree on this one:
        the detectors see the same failures whatever is done about them);
    recovery rate
        runs whose latest diagnosis is healthy again / runs with a failure: the failure was got
        past, whether by a repair (repair arm) or by the agent on its own (shadow arm), judged by
        the same detectors in both arms;
    task success rate
        runs whose effective run-level label (``POST /v1/traces/{id}/labels``, the rules of
        :mod:`serve.services.run_labels`: a human outranks a checker) says ``failed: false`` / labelled runs.
        The agent's own verdict on its task comes in the same way, as a label with
        ``author_type: "checker"`` (a human's label on the run overrides it); an outcome posted with
        a ``label`` is one too. Unlabelled runs are left out of this rate (their count is shown).
    time to recovery
        of the recovered runs, the seconds from the run's first failure (the diagnosis that found
        it, and gave its first recommendation) to the diagnosis that found it healthy again: a
        histogram (``triage_canary_recovery_seconds``) and its median. Both arms are judged by the
        same detectors, so the shadow arm's times are what the agent does on its own.

The store keeps these counts on write (:mod:`serve.store.counters`: per tenant, hour the runs
started and arm), so a scrape reads at most one row per hour of the window and arm, whatever the
history's size (``bench/canary_metrics.py``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from serve.store.reports import ReportStore
from serve.store.tables import RECOVERY_BOUNDS as _BOUNDS

Arm = Literal["repair", "shadow"]
ARMS: tuple[Arm, ...] = ("repair", "shadow")
BUCKETS = 10_000
#: Where a run's arm is kept in its repair state (sessions: the ``sessions`` row; sessionless
#: traces: the trace's own policy state).
STATE_KEY = "canary_arm"
#: ``TRIAGE_CANARY_WINDOW``'s default: the figures of the runs started in the last 7 days.
DEFAULT_WINDOW = timedelta(days=7)


def bucket(tenant: str, session_key: str) -> int:
    """The session's bucket in ``[0, BUCKETS)``, the same in every process.

    >>> bucket("acme", "conv-42") == bucket("acme", "conv-42")
    True
    >>> 0 <= bucket("acme", "conv-42") < BUCKETS
    True
    """
    digest = hashlib.sha256(f"{tenant}\x1f{session_key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % BUCKETS


def assign_arm(tenant: str, session_key: str, percent: float) -> Arm:
    """``repair`` for ``percent`` % of sessions (by :func:`bucket`), ``shadow`` for the rest.

    >>> assign_arm("acme", "conv-42", 100.0), assign_arm("acme", "conv-42", 0.0)
    ('repair', 'shadow')
    """
    return "repair" if bucket(tenant, session_key) < round(percent * BUCKETS / 100) else "shadow"


def session_arm(state: dict[str, Any], tenant: str, session_key: str, percent: float) -> Arm:
    """The run's arm: the one kept in its repair ``state``, else assigned now and kept there."""
    kept = state.get(STATE_KEY)
    if kept in ARMS:
        return kept  # type: ignore[no-any-return]
    arm = assign_arm(tenant, session_key, percent)
    state[STATE_KEY] = arm
    return arm


RECOVERY_BOUNDS = tuple(float(b) for b in _BOUNDS)
#: Per arm: these counts, and ``recovery_s`` (the recovered runs' seconds, summed) and ``le`` (the
#: recovered runs whose recovery took at most each bound of :data:`RECOVERY_BOUNDS`, cumulative).
COUNTS = ("runs", "failed", "recovered", "labelled", "succeeded")


def snapshot(
    store: ReportStore, tenant: str | None = None, *, window: timedelta = DEFAULT_WINDOW, now: datetime | None = None
) -> dict[str, dict[str, Any]]:
    """Per arm, over the runs started in the window (since the top of the hour ``window`` before
    ``now``): ``runs``, ``failed`` (some diagnosis found a failure), ``recovered`` (of those, the
    latest diagnosis is healthy), ``labelled`` and ``succeeded`` (effective run label ``failed:
    false``), ``recovery_s`` and ``le`` (the time to recovery). ``tenant=None``: every tenant's runs.
    Read from the counts the store keeps on write (:mod:`serve.store.counters`): a few rows per hour
    of the window, whatever the history's size."""
    since = (now or datetime.now(UTC)) - window
    got = store.canary_counts(tenant, since)
    out: dict[str, dict[str, Any]] = {}
    for arm in ARMS:
        c = got.get(arm, {})
        out[arm] = {k: int(c.get(k, 0)) for k in COUNTS}
        out[arm]["recovery_s"] = float(c.get("recovery_s", 0.0))
        out[arm]["le"] = [int(c.get(f"rec_le_{b}", 0)) for b in _BOUNDS]
    return out


def median_recovery_s(le: list[int], recovered: int) -> float | None:
    """The median time to recovery estimated from the histogram's buckets, as PromQL's
    ``histogram_quantile(0.5, …)`` does: linear within the bucket that holds it (the highest bound
    when it lies beyond).

    >>> median_recovery_s([0, 1, 3, 4, 4, 4, 4, 4], 4)  # ≤10 s: 0, ≤30 s: 1, ≤60 s: 3
    45.0
    >>> median_recovery_s([0] * 8, 0) is None
    True
    """
    if recovered <= 0:
        return None
    rank = recovered / 2
    below, lower = 0, 0.0
    for bound, cum in zip(RECOVERY_BOUNDS, le, strict=True):
        if cum >= rank:
            return lower + (bound - lower) * (rank - below) / (cum - below) if cum > below else bound
        below, lower = cum, bound
    return RECOVERY_BOUNDS[-1]


class CanaryCollector(Collector):
    """The canary's figures per arm over the window on every scrape (read from the store, as every worker sees them)."""

    def __init__(
        self, store: ReportStore, tenant: str | None = None, percent: float | None = None, window: timedelta = DEFAULT_WINDOW
    ) -> None:
        self.store = store
        self.tenant = tenant
        self.percent = percent
        self.window = window

    def collect(self) -> Iterator[Any]:
        snap = snapshot(self.store, self.tenant, window=self.window)
        share = GaugeMetricFamily(
            "triage_repair_canary_percent", "Share of new sessions put in the repair arm (TRIAGE_REPAIR_CANARY_PERCENT)"
        )
        if self.percent is not None:
            share.add_metric([], self.percent)
        yield share
        yield GaugeMetricFamily("triage_canary_window_seconds", "The window of the canary figures (TRIAGE_CANARY_WINDOW)",
                                value=self.window.total_seconds())
        counts = {
            "runs": ("triage_canary_runs", "Runs (sessions, sessionless traces) of each arm started in the window"),
            "failed": ("triage_canary_failed_runs", "Runs of each arm in which some diagnosis found a failure"),
            "recovered": (
                "triage_canary_recovered_runs",
                "Runs of each arm with a failure whose latest diagnosis is healthy again",
            ),
            "labelled": ("triage_canary_labelled_runs", "Runs of each arm with a run-level label"),
            "succeeded": (
                "triage_canary_succeeded_runs",
                "Runs of each arm whose effective run-level label says the task succeeded",
            ),
        }
        for key, (name, doc) in counts.items():
            fam = GaugeMetricFamily(name, doc + " (runs started in the window)", labels=["arm"])
            for arm in ARMS:
                fam.add_metric([arm], snap[arm][key])
            yield fam
        ratios = {
            "triage_canary_failure_ratio": ("failed", "runs", "Failed runs / runs, per arm"),
            "triage_canary_recovery_ratio": ("recovered", "failed", "Recovered runs / failed runs, per arm"),
            "triage_canary_task_success_ratio": (
                "succeeded",
                "labelled",
                "Runs labelled successful / labelled runs, per arm (run-level labels)",
            ),
        }
        for name, (num, den, doc) in ratios.items():
            ratio = GaugeMetricFamily(name, doc, labels=["arm"])
            for arm in ARMS:
                if snap[arm][den]:  # no runs, no rate (rather than a made-up 0)
                    ratio.add_metric([arm], snap[arm][num] / snap[arm][den])
            yield ratio
        hist = HistogramMetricFamily(
            "triage_canary_recovery_seconds",
            "Time to recovery per arm (runs started in the window): from the run's first failure to the "
            "diagnosis that found it healthy again",
            labels=["arm"],
        )
        median = GaugeMetricFamily(
            "triage_canary_median_recovery_seconds",
            "Median time to recovery per arm, estimated from triage_canary_recovery_seconds' buckets",
            labels=["arm"],
        )
        for arm in ARMS:
            a = snap[arm]
            buckets = [(f"{b:g}", n) for b, n in zip(RECOVERY_BOUNDS, a["le"], strict=True)]
            hist.add_metric([arm], [*buckets, ("+Inf", a["recovered"])], sum_value=a["recovery_s"])
            m = median_recovery_s(a["le"], a["recovered"])
            if m is not None:
                median.add_metric([arm], m)
        yield hist
        yield median


__all__ = ["ARMS", "BUCKETS", "COUNTS", "DEFAULT_WINDOW", "RECOVERY_BOUNDS", "STATE_KEY", "Arm", "CanaryCollector",
           "assign_arm", "bucket", "median_recovery_s", "session_arm", "snapshot"]

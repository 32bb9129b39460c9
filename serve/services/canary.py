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

The figures per arm (over every run the tenant has in the store; a run = a session or a
sessionless trace)
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
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any, Literal

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from serve.services.run_labels import effective_label
from serve.store import Store

Arm = Literal["repair", "shadow"]
ARMS: tuple[Arm, ...] = ("repair", "shadow")
BUCKETS = 10_000
#: Where a run's arm is kept in its repair state (sessions: the ``sessions`` row; sessionless
#: traces: the trace's own policy state).
STATE_KEY = "canary_arm"


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


def snapshot(store: Store, tenant: str | None = None) -> dict[str, dict[str, int]]:
    """Per arm: ``runs``, ``failed`` (some diagnosis found a failure), ``recovered`` (of those, the
    latest diagnosis is healthy), ``labelled`` and ``succeeded`` (effective run label ``failed:
    false``). ``tenant=None``: every tenant's runs."""
    out: dict[str, dict[str, int]] = {arm: {"runs": 0, "failed": 0, "recovered": 0, "labelled": 0, "succeeded": 0} for arm in ARMS}
    counts, by_run = store.arm_runs(tenant)
    for arm, runs, n_failed, n_recovered in counts:
        if arm in out:
            out[arm].update(runs=runs, failed=n_failed, recovered=n_recovered)
    # the effective label is decided per run
    for (arm, _, _), rows in by_run.items():
        eff = effective_label(rows)
        if eff is None or arm is None or arm not in out:
            continue
        out[arm]["labelled"] += 1
        out[arm]["succeeded"] += 0 if eff.failed else 1
    return out


class CanaryCollector(Collector):
    """The canary's figures per arm on every scrape (read from the store, as every worker sees them)."""

    def __init__(self, store: Store, tenant: str | None = None, percent: float | None = None) -> None:
        self.store = store
        self.tenant = tenant
        self.percent = percent

    def collect(self) -> Iterator[Any]:
        snap = snapshot(self.store, self.tenant)
        share = GaugeMetricFamily(
            "triage_repair_canary_percent", "Share of new sessions put in the repair arm (TRIAGE_REPAIR_CANARY_PERCENT)"
        )
        if self.percent is not None:
            share.add_metric([], self.percent)
        yield share
        counts = {
            "runs": ("triage_canary_runs", "Runs (sessions, sessionless traces) assigned to each arm"),
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
            fam = CounterMetricFamily(name, doc, labels=["arm"])
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


__all__ = ["ARMS", "BUCKETS", "STATE_KEY", "Arm", "CanaryCollector", "assign_arm", "bucket", "session_arm", "snapshot"]

"""Metric streams: posted observations, offline change points, the per-agent autofeed and the
``degradation`` findings its open alarms give the agent's runs (docs/architecture.md, "The stateful service": Streams).

A stream is keyed (tenant, agent, name); its detector's state lives in the ``streams`` row, locked
for the transaction that feeds it, so concurrent feeds run one after the other.

**The feed.** A diagnosis does not feed its run's values (:meth:`Streams.observed`) in its own transaction:
it writes them as one row of ``stream_feed``, committed with the run, and the worker's feeder — a thread
woken by the first such row, which waits ``feed_s`` seconds (``TRIAGE_STREAM_FEED_S``, default 1) to gather
more — applies every waiting row (any worker's) in ``id`` order, :data:`FEED_BATCH` a transaction, each
agent's streams locked once a batch, and deletes them in that transaction, under the feed's lock
(PostgreSQL: an advisory lock; SQLite: the write lock): each run's values are applied once, whoever applies
them. This took the streams' rows, reads and JSON out of every diagnosis's write (about a third of its
store work on SQLite: docs/benchmarks.md, "Round 9") and shares a stream's
update among the runs of a batch. Readers see every run committed before them: a posted observation, the
change points and the console's stream pages apply what waits first; a worker's shutdown applies what it
left; what a killed worker left, the next batch of any worker, an idle feeder within :data:`IDLE_CHECK_S`
(a minute), or the upkeep loop (start-up, hourly). What lags by up to ``feed_s``: an
alarm raised by a run's values (it shows in the agent's diagnoses ``feed_s`` + ``alarm_ttl_s`` later at
most, where it showed ``alarm_ttl_s`` later in other workers before) and the open alarms listed by
``/metrics`` and the console's overview. ``feed_s`` 0 applies each diagnosis's values in its transaction.
"""

from __future__ import annotations

import importlib.metadata
import logging
import math
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

from model.core.agents import clean_agent_name
from model.core.errors import InputError, NotFoundError
from model.core.findings import DiagnosisResponse, Finding
from model.core.kinds import FailureKind
from model.core.schema import Trace
from model.diagnosis.diagnoser import DEFAULT_THRESHOLDS, Diagnoser
from model.streams import Alarm, detect_changepoints
from model.streams.catalog import make_stream_detector
from model.streams.metrics import extract_metrics
from serve.schemas import (
    AlarmOut,
    ChangepointsResponse,
    ObservationsRequest,
    ObservationsResponse,
    SegmentOut,
)
from serve.store.counters import COUNT_FEED_BATCH, apply_count_feed, count_feed_waiting
from serve.store.streams import StreamStore
from serve.store.tables import utcnow

#: Observations looked at by ``GET /v1/streams/{name}/changepoints`` (MEASUREMENTS.md: Binseg l2
#: on 2,000 points ≈ 80 ms).
CHANGEPOINT_WINDOW = 2000
_RUPTURES_VERSION = importlib.metadata.version("ruptures")
#: Confidence of a stream alarm on a trace whose own value is not out of band: a signal (half the
#: ``degradation`` threshold), reported and not acted on.
DEGRADATION_SIGNAL_CONFIDENCE = 0.5 * DEFAULT_THRESHOLDS[FailureKind.DEGRADATION]
#: (tenant, agent) pairs whose open alarms a worker keeps (all dropped past it, then read again).
MAX_ALARM_ENTRIES = 10_000
#: Runs of the feed applied per transaction (:meth:`Streams.drain`).
FEED_BATCH = 200
#: Seconds an idle feeder waits before it looks for rows another worker left (one that stopped before applying them).
IDLE_CHECK_S = 60.0

log = logging.getLogger("triage.streams")


class Streams:
    """The tenant's metric streams.

    Parameters
    ----------
    stream_store, diagnoser:
        The streams' store; the diagnoser whose ``model_version`` the answers name.
    detector:
        The stream detector's registry name (``TRIAGE_STREAM_DETECTOR``).
    autofeed:
        Per-trace metrics fed into the agent's streams as its runs are diagnosed.
    feed_s:
        Seconds the feeder gathers runs' values before it applies them (``TRIAGE_STREAM_FEED_S``); 0: each
        diagnosis applies its own in its transaction.
    """

    def __init__(self, stream_store: StreamStore, diagnoser: Diagnoser, *, detector: str = "cusum",
                 autofeed: Sequence[str] = (), alarm_ttl_s: float = 1.0, feed_s: float = 0.0) -> None:
        self.stream_store = stream_store
        # the feed (module docstring): runs' values applied in batches by a thread of the worker
        self.feed_s = feed_s
        self._feeder: threading.Thread | None = None
        self._feeder_lock = threading.Lock()
        self._waiting = threading.Event()  # a value was written since the last batch
        self._closing = threading.Event()
        # The open alarms each (tenant, agent) last read, and when: a diagnosis reads them from here
        # (no query) for ``alarm_ttl_s``; this worker's own feeds and posts that open or close an
        # episode drop the tenant's entries at once (another worker's show within the TTL).
        self.alarm_ttl_s = alarm_ttl_s
        self._alarms: dict[tuple[str, str], tuple[float, list[dict[str, Any]]]] = {}
        self.diagnoser = diagnoser
        self.detector = detector
        self.autofeed = tuple(sorted(set(autofeed)))  # sorted: one lock order

    # -- posted observations ---------------------------------------------------------------------
    def observe(self, tenant: str, stream: str, req: ObservationsRequest) -> ObservationsResponse:
        """Feed values to the stream's detector (state in the store); alarms are returned and kept.

        The stream is keyed (tenant, agent, name): ``req.agent``, else ``req.task_type`` (what a
        run that names no agent resolves to), else ``""`` (every agent of the tenant).
        """
        _check_stream_name(stream)
        agent = _stream_agent(req.agent, req.task_type)
        params = dict(req.params or {})
        # Validate the parameters before touching the store (a bad one is the caller's error).
        try:
            make_stream_detector(self.detector, **params)
        except InputError as exc:
            exc.path = f"params.{exc.path}" if exc.path and exc.path != "detectors" else "params"
            raise
        except (TypeError, ValueError) as exc:
            raise InputError(f"not a setting of the {self.detector} detector: {exc}", path="params") from None
        except ArithmeticError as exc:  # e.g. an ARL0 so large that the decision interval overflows
            raise InputError(
                f"these {self.detector} settings can't be computed ({exc}); use a smaller arl0 / shift",
                path="params",
            ) from None
        alarms: list[Alarm] = []
        waiting = self.feed_s > 0 and self.stream_store.feed_waiting()
        with self.stream_store.write() as db:
            if waiting:  # the runs' values written before come first
                self.apply_waiting_in(db)
            row = self.stream_store.lock_stream(db, tenant, stream, agent, detector=self.detector, params=params)
            if req.params is not None and row.n > 0 and req.params != row.params:
                raise InputError(
                    f"stream {stream!r} already runs with params {row.params}; its settings are fixed "
                    "once it has observations",
                    path="params",
                )
            det = make_stream_detector(row.detector, **row.params)
            if row.state:
                det.set_state(row.state)
            if req.rebaseline:
                history = [v for _, v in self.stream_store.stream_values(tenant, stream, agent, last=CHANGEPOINT_WINDOW)]
                start = int((row.alarm or {}).get("start", 0))
                window = history[max(0, start - (row.n - len(history))) :] if row.alarm_open else history
                det.rebaseline(values=window or None)  # type: ignore[attr-defined]
                row.alarm_open = False
            observations = []
            for i, v in enumerate(req.values):
                a = det.update(float(v))
                if a is not None:
                    alarms.append(a)
                observations.append({"tenant_id": tenant, "stream": stream, "agent": agent, "seq": row.n + i,
                                     "value": float(v), "alarm": a is not None})
            self.stream_store.add_observations(db, observations)
            row.n += len(req.values)
            row.state = det.get_state()
            row.alarm_open = _episode_open(det, row.alarm_open or bool(alarms))
            if alarms:
                row.alarm = alarms[-1].model_dump()
            row.updated_at = utcnow()
            n, alarm_open = row.n, row.alarm_open
            monitoring = bool(getattr(det, "monitoring", True))
        self.forget_alarms(tenant)  # posted values may have opened or closed an episode
        return ObservationsResponse(
            model_version=self.diagnoser.model_version,
            detector_versions={det.name: det.version},
            stream=stream,
            agent=agent,
            task_type=agent,
            n=n,
            alarms=[AlarmOut(**a.model_dump()) for a in alarms],
            alarm_open=alarm_open,
            monitoring=monitoring,
        )

    def changepoints(
        self, tenant: str, stream: str, agent: str | None, method: str | None, *, task_type: str = ""
    ) -> ChangepointsResponse:
        """Offline change points (ruptures, l2) over the stream's last observations (its agent as
        in :meth:`observe`)."""
        agent = _stream_agent(agent, task_type, where="query.")
        self.drain_waiting()
        row = self.stream_store.get_stream(tenant, stream, agent)
        if row is None:
            raise NotFoundError(f"no stream {stream!r} of agent {agent!r} for this tenant")
        pairs = self.stream_store.stream_values(tenant, stream, agent, last=CHANGEPOINT_WINDOW)
        offset = pairs[0][0] if pairs else 0
        values = [v for _, v in pairs]
        if len(values) < 10:
            cps: list[int] = []
            segments = [SegmentOut(start=offset, end=offset + len(values), mean=_mean(values))] if values else []
            used = method or "binseg"
        else:
            found = detect_changepoints(values, method=method, max_points=None)  # type: ignore[arg-type]
            cps = [c + offset for c in found.changepoints]
            segments = [SegmentOut(start=s.start + offset, end=s.end + offset, mean=s.mean) for s in found.segments]
            used = found.method
        return ChangepointsResponse(
            model_version=self.diagnoser.model_version,
            detector_versions={"ruptures": _RUPTURES_VERSION},
            stream=stream,
            agent=agent,
            task_type=agent,
            n=row.n,
            changepoints=cps,
            segments=segments,
            method=used,
        )

    # -- the autofeed ----------------------------------------------------------------------------
    def observed(self, trace: Trace, resp: DiagnosisResponse) -> dict[str, float]:
        """What this trace and its answer feed into its agent's streams (stream name → value): the
        autofed per-trace metrics that are finite (:meth:`feed_values` feeds them).

        Keyed (tenant, agent, stream): each agent warms up a baseline of its own, so that one
        agent's runs are never judged against another's. Alarms raised by a feed show up as
        ``degradation`` in the agent's next diagnoses, not this one."""
        prob = resp.failure_probability
        if prob is None and "classifier" in resp.detector_versions:
            scores = [
                f.confidence for f in [*resp.failures, *resp.signals] if "classifier" in (f.detectors or [f.detector])
            ]
            prob = max(scores, default=0.0)
        # the refusal rule runs again only for a refusal stream (autofed by name; not by default)
        metrics = extract_metrics(trace, failure_prob=prob,
                                  refusal_detector="refusal" if "refusal" in self.autofeed else None)
        values = {}
        for name in self.autofeed:
            value = metrics.per_trace.get(name)
            if value is not None and math.isfinite(value) and abs(value) <= 1e12:
                values[name] = float(value)
        return values

    def feed_values(self, db: Any, tenant: str, trace_id: str, agent: str, values: dict[str, float]) -> None:
        """Feed ``values`` (:meth:`observed`) of run ``trace_id`` into ``agent``'s streams, from the run's own
        transaction ``db``: with ``feed_s`` > 0 they wait in the feed (one row, committed with the run) for
        this worker's feeder (:meth:`drain`, within ``feed_s`` seconds); with 0 they are applied here."""
        if not values:
            return
        if self.feed_s <= 0:
            self._apply(db, [(tenant, agent, trace_id, values)])
            return
        self.stream_store.enqueue_feed(db, tenant, agent, trace_id, values)
        self.wake()

    def drain(self, limit: int = FEED_BATCH) -> int:
        """Apply every value waiting in the feed (this worker's and any other's), ``limit`` runs a
        transaction, in the order they were written; the number of runs applied. Each row is deleted in the
        transaction that applies it, under the feed's lock (PostgreSQL's advisory lock; SQLite's write
        lock), so every run is applied once, whichever worker or replica applies it."""
        done = 0
        while True:
            with self.stream_store.unit() as db:
                n = self.drain_in(db, limit)
                # the runs' count changes (serve/store/counters.py, "the count feed"), in the same transaction
                m = apply_count_feed(db) if count_feed_waiting(db) else 0
            done += n
            if n < limit and m < COUNT_FEED_BATCH:
                return done

    def drain_in(self, db: Any, limit: int = FEED_BATCH) -> int:
        """:meth:`drain`'s work in transaction ``db``, at most ``limit`` runs; the number applied."""
        self.stream_store.lock_feed(db)
        rows = self.stream_store.take_feed(db, limit)
        if rows:
            self._apply(db, [(t, a, tid, v) for _, t, a, tid, v in rows])
            self.stream_store.done_feed(db, [r[0] for r in rows])
        return len(rows)

    def apply_waiting_in(self, db: Any) -> None:
        """Every run waiting in the feed applied in transaction ``db`` (none with ``feed_s`` 0): what a posted
        observation and an agent's move or reset do first, so that the values written before them count before
        them."""
        while self.feed_s > 0 and self.drain_in(db) == FEED_BATCH:
            pass

    def drain_waiting(self) -> None:
        """:meth:`drain` when the feed has a row waiting (one read otherwise): what a reader of the streams
        calls first, so that it sees every run committed before it."""
        if self.feed_s > 0 and self.waiting():
            self.drain()

    def waiting(self) -> bool:
        """Whether the streams' feed or the count feed holds a row not applied yet (a read of each)."""
        return self.stream_store.feed_waiting() or self.stream_store.counts_waiting()

    def _apply(self, db: Any, runs: list[tuple[str, str, str, dict[str, float]]]) -> None:
        """In transaction ``db``: feed each run's values (``tenant, agent, trace_id, values``, in order) into
        its agent's streams, locked once per (tenant, agent) in key order: one observation a value, one
        update a stream."""
        by_agent: dict[tuple[str, str], list[tuple[str, dict[str, float]]]] = {}
        for tenant, agent, trace_id, values in runs:
            by_agent.setdefault((tenant, agent), []).append((trace_id, values))
        now = utcnow()
        moved: set[str] = set()
        for (tenant, agent), fed in sorted(by_agent.items()):
            names = sorted({name for _, values in fed for name in values})
            rows = self.stream_store.lock_streams(db, tenant, agent, names, detector=self.detector)
            streams = {name: FedStream(rows[name]) for name in names}
            observations = []
            for trace_id, values in fed:
                for name, value in sorted(values.items()):
                    st = streams[name]
                    seq = st.n
                    observations.append({"tenant_id": tenant, "stream": name, "agent": agent, "seq": seq,
                                         "value": value, "trace_id": trace_id, "alarm": advance_stream(st, value),
                                         "created_at": now})
            self.stream_store.add_observations(db, observations)
            changes = [{"name": name, "n": st.n, "state": stream_state(st), "alarm_open": st.alarm_open,
                        "alarm": st.alarm} for name, st in streams.items()]
            self.stream_store.update_streams(db, tenant, agent, changes)
            if any(st.alarm_open != bool(st.row["alarm_open"]) or st.alarm is not st.row["alarm"]
                   for st in streams.values()):
                moved.add(tenant)
        for tenant in moved:
            self.forget_alarms(tenant)

    # -- the feeder ------------------------------------------------------------------------------
    def wake(self) -> None:
        """A run's values were written to the feed: the feeder applies them within ``feed_s`` (started here
        at the first)."""
        if self._feeder is None:
            with self._feeder_lock:
                if self._feeder is None and not self._closing.is_set():
                    self._feeder = threading.Thread(target=_feed_loop, args=(weakref.ref(self),),
                                                    name="triage-stream-feed", daemon=True)
                    self._feeder.start()
        self._waiting.set()

    def close(self) -> None:
        """Stop the feeder and apply what waits (a worker's shutdown); what fails to apply stays in the
        feed for the next worker's feeder or reader."""
        self._closing.set()
        self._waiting.set()
        if self._feeder is not None:
            self._feeder.join(timeout=30)
        try:
            self.drain_waiting()
        except Exception:
            log.exception("stream feed: applying the waiting values at shutdown failed; they stay in the feed")

    def open_alarms(self, tenant: str, agent: str) -> list[dict[str, Any]]:
        """The open alarms of ``agent``'s streams and of every agent's (``""``), at most
        ``alarm_ttl_s`` old (:meth:`forget_alarms` drops them)."""
        now = time.monotonic()
        hit = self._alarms.get((tenant, agent))
        if hit is not None and now - hit[0] < self.alarm_ttl_s:
            return hit[1]
        alarms = self.stream_store.open_alarms(tenant, agent)
        if len(self._alarms) >= MAX_ALARM_ENTRIES:
            self._alarms.clear()
        self._alarms[(tenant, agent)] = (now, alarms)
        return alarms

    def forget_alarms(self, tenant: str) -> None:
        """Drop this worker's cached open alarms of ``tenant`` (an episode opened or closed here)."""
        for key in [k for k in self._alarms if k[0] == tenant]:
            self._alarms.pop(key, None)

    def degradation_findings(self, tenant: str, trace: Trace, agent: str) -> list[Finding]:
        """Open stream alarms of this tenant, of the run's ``agent`` or of every agent, as findings.

        An alarm is about the agent: a ``degradation`` *signal* on each of its runs while the
        episode is open. It is a failure of this run only when the alarm is on this agent's own
        stream and the run's own value for it (its per-trace metric of that name, e.g.
        ``latency_ms`` or ``meta.<key>``) lies beyond the alarm's bound, the agent's baseline
        ``mean ± shift · std`` in the alarm's direction. A stream posted for every agent (``""``)
        has no baseline of this agent's: a signal at most.
        """
        alarms = self.open_alarms(tenant, agent)
        if not alarms:
            return []
        own: dict[str, float | None] = {}
        if any((s["alarm"] or {}).get("bound") is not None for s in alarms):
            own = extract_metrics(trace).per_trace  # failure_probability: not known yet (None)
        out = []
        for s in alarms:
            alarm = s["alarm"] or {}
            mine = s["agent"] == agent
            value = own.get(s["name"])
            beyond, note = _own_value(alarm, value)
            direction = alarm.get("direction", "?")
            where = f" of agent {s['agent']!r}" if mine else " of every agent"
            out.append(
                Finding(
                    detector=f"stream:{s['detector']}",
                    kind=FailureKind.DEGRADATION,
                    confidence=1.0 if beyond and mine else DEGRADATION_SIGNAL_CONFIDENCE,
                    evidence=f"stream {s['name']!r}{where} drifted {direction} from observation "
                    f"{alarm.get('start', '?')} (alarm at {alarm.get('index', '?')}){note}",
                    details={"stream": s["name"], "agent": s["agent"], "alarm": alarm, "value": value,
                             "beyond": beyond},
                )
            )
        return out


def _own_value(alarm: dict[str, Any], value: float | None) -> tuple[bool, str]:
    """Whether a trace's own ``value`` is beyond the alarm's bound in its direction, and a note."""
    bound = alarm.get("bound")
    if value is None or not isinstance(bound, int | float):
        return False, ""
    beyond = value > bound if alarm.get("direction") == "up" else value < bound
    return beyond, f"; this trace's {value:g} is {'beyond' if beyond else 'within'} its bound {bound:g}"


def _feed_loop(ref: weakref.ref[Streams]) -> None:
    """A worker's feeder (:meth:`Streams.wake` starts it): from the first value written after the last batch,
    ``feed_s`` seconds to gather more, then :meth:`Streams.drain`; idle, every :data:`IDLE_CHECK_S` it looks for
    rows another worker left and applies them. A failure (the store unavailable) is logged
    and tried again after twice the wait before, up to a minute; the rows stay in the feed meanwhile. It holds
    the service only while it works on it: a service dropped without :meth:`Streams.close` ends it."""
    wait = 0.0
    while True:
        me = ref()
        if me is None or me._closing.is_set():
            return
        waiting, closing, wait = me._waiting, me._closing, wait or me.feed_s
        del me
        if not waiting.wait(IDLE_CHECK_S):  # idle: rows a stopped worker left, if any, are applied too
            me = ref()
            if me is None or closing.is_set():
                return
            try:
                if me.waiting():
                    waiting.set()
            except Exception as exc:
                log.warning("stream feed: looking for waiting values failed (%s)", exc)
            del me
            continue
        closing.wait(wait)
        me = ref()
        if me is None or closing.is_set():
            return
        waiting.clear()
        try:
            me.drain()
            wait = 0.0
        except Exception as exc:  # the store failed: the rows wait in the feed for the next try
            wait = min(60.0, max(wait, 0.05) * 2)
            log.warning("stream feed: applying the waiting values failed (%s); trying again in %.1f s", exc, wait)
            waiting.set()
        del me


class FedStream:
    """A locked stream row (:meth:`serve.store.streams.StreamStore.lock_streams`) while values are fed to it:
    its detector (built at the first value), count, alarm episode and kept alarm."""

    __slots__ = ("row", "det", "n", "alarm_open", "alarm")

    def __init__(self, row: dict[str, Any]) -> None:
        self.row = row
        self.det: Any = None
        self.n = int(row["n"])
        self.alarm_open = bool(row["alarm_open"])
        self.alarm: dict[str, Any] | None = row["alarm"]


def advance_stream(st: FedStream, value: float) -> bool:
    """Feed ``value`` to the stream's detector: whether it raised an alarm (kept, its episode opened). The
    detector's work alone (no SQL): ``bench/request_path.py`` tells it apart from the store's."""
    if st.det is None:
        st.det = make_stream_detector(st.row["detector"], **st.row["params"])
        if st.row["state"]:
            st.det.set_state(st.row["state"])
    alarm = st.det.update(value)
    st.alarm_open = _episode_open(st.det, st.alarm_open or alarm is not None)
    if alarm is not None:
        st.alarm = alarm.model_dump()
    st.n += 1
    return alarm is not None


def stream_state(st: FedStream) -> dict[str, Any]:
    """The detector's state after the values fed (:func:`advance_stream`, at least once)."""
    state: dict[str, Any] = st.det.get_state()
    return state


def _episode_open(det: Any, fallback: bool) -> bool:
    """The detector's own word on whether its alarm episode is still open (a detector without
    episodes: open from its first alarm until a re-baseline)."""
    value = getattr(det, "alarm_open", None)
    return bool(value) if isinstance(value, bool) else fallback


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _stream_agent(agent: str | None, task_type: str, *, where: str = "") -> str:
    """The agent a posted stream belongs to: ``agent``; else ``task_type`` (streams were keyed by
    it before, and a run naming no agent resolves to its task type); else ``""``, every agent.
    Names are cleaned as a run's are (:func:`model.core.agents.clean_agent_name`: outer blanks off).
    Both given and different: an :class:`InputError` naming ``task_type`` (``where``: its prefix)."""
    task = clean_agent_name(task_type) or ""
    if agent is None:
        return task
    name = clean_agent_name(agent) or ""
    if task and task != name:
        raise InputError(
            f"agent {agent!r} and task_type {task_type!r} name two streams; give the agent only",
            path=f"{where}task_type",
        )
    return name


def _check_stream_name(name: str) -> None:
    if not name or len(name) > 200 or not name.isprintable():
        raise InputError("a stream name is 1-200 printable characters", path="path.name")


__all__ = ["CHANGEPOINT_WINDOW", "DEGRADATION_SIGNAL_CONFIDENCE", "FEED_BATCH", "FedStream", "Streams", "advance_stream",
           "stream_state"]

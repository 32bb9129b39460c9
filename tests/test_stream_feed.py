"""The streams' feed (``serve/services/streams.py``, "The feed"; revision 0023): a diagnosis writes its run's
values as one row of ``stream_feed``; the worker's feeder applies the waiting rows in batches, each once, in
the order written; readers of the streams, a posted observation and a worker's shutdown apply what waits
first. On SQLite and PostgreSQL, with two services (two workers) on one database."""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import func, select

from model.core.options import DiagnoseOptions
from model.diagnosis.diagnoser import Diagnoser
from model.streams.catalog import make_stream_detector
from serve.schemas import ObservationsRequest
from serve.services.triage import TriageService
from serve.settings import Settings
from serve.store.tables import ObservationRow, StreamFeedRow, StreamRow
from serve.wiring import build_service
from tests.storefix import db_url  # noqa: F401  (fixture)
from tests.test_streams_agent import _run


def _service(url: str, tmp_path: Path, feed_s: float) -> TriageService:
    return build_service(Settings(data_dir=tmp_path, database_url=url, stream_feed_s=feed_s), Diagnoser())


def _waiting(svc: TriageService) -> int:
    with svc.stores.db.read() as db:
        return int(db.scalar(select(func.count()).select_from(StreamFeedRow)) or 0)


def _left_after_feeder(svc: TriageService, within_s: float = 20) -> int:
    """The feed's waiting rows once none waits (the feeder applied them), or ``within_s`` seconds have passed."""
    deadline = time.monotonic() + within_s
    while (waiting := _waiting(svc)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return waiting


def _observations(svc: TriageService, agent: str) -> dict[str, list[tuple[int, float, str | None]]]:
    with svc.stores.db.read() as db:
        rows = db.execute(select(ObservationRow.stream, ObservationRow.seq, ObservationRow.value, ObservationRow.trace_id)
                          .where(ObservationRow.tenant_id == "t", ObservationRow.agent == agent)
                          .order_by(ObservationRow.stream, ObservationRow.seq)).all()
    out: dict[str, list[tuple[int, float, str | None]]] = {}
    for stream, seq, value, trace_id in rows:
        out.setdefault(stream, []).append((int(seq), float(value), trace_id))
    return out


def _check_replay(svc: TriageService, agent: str, runs: set[str]) -> None:
    """Each stream of ``agent``: seqs 0..n-1, each run once, every run of ``runs`` there, and its detector's
    stored state the one its observations give replayed in seq order."""
    obs = _observations(svc, agent)
    with svc.stores.db.read() as db:
        streams = {r.name: r for r in db.execute(select(StreamRow).where(StreamRow.tenant_id == "t",
                                                                          StreamRow.agent == agent)).scalars()}
    assert set(streams) == set(obs) and obs
    for name, row in streams.items():
        seqs = [s for s, _, _ in obs[name]]
        ids = [t for _, _, t in obs[name]]
        assert seqs == list(range(row.n)), name  # no gap, no seq twice
        assert sorted(ids) == sorted(runs), name  # each run once
        det = make_stream_detector(row.detector, **row.params)
        for _, v, _ in obs[name]:
            det.update(v)
        replay = det.get_state()
        assert replay.keys() == row.state.keys()
        for k, v in row.state.items():
            assert replay[k] == v or (isinstance(v, float) and math.isclose(replay[k], v, rel_tol=1e-9)), (name, k)


def test_the_feeder_applies_the_runs_values_after_gathering_them(db_url: str, tmp_path: Path) -> None:  # noqa: F811
    svc = _service(db_url, tmp_path, 0.5)
    try:
        ids = [f"r{i}" for i in range(6)]
        for i, tid in enumerate(ids):
            svc.diagnose("t", _run(60 + i, tid, agent="a"), DiagnoseOptions())
        # written with the runs, not applied by them
        assert _waiting(svc) == 6 and _observations(svc, "a") == {}
        assert _left_after_feeder(svc) == 0
        _check_replay(svc, "a", set(ids))
        chars = [v for _, v, _ in _observations(svc, "a")["output_chars"]]
        assert chars == [float(60 + i) for i in range(6)]  # in the order written
    finally:
        svc.close()


def test_a_reader_and_a_posted_observation_apply_what_waits_first(db_url: str, tmp_path: Path) -> None:  # noqa: F811
    svc = _service(db_url, tmp_path, 60)  # the feeder would wait a minute
    try:
        for i in range(3):
            svc.diagnose("t", _run(60, f"r{i}", agent="a"), DiagnoseOptions())
        assert _waiting(svc) == 3
        assert svc.changepoints("t", "output_chars", "a", None).n == 3  # the reader applied them
        assert _waiting(svc) == 0
        svc.diagnose("t", _run(70, "r3", agent="a"), DiagnoseOptions())
        posted = svc.observe("t", "output_chars", ObservationsRequest(agent="a", values=[99.0]))
        assert posted.n == 5  # the run written before the post counts before it
        obs = _observations(svc, "a")["output_chars"]
        assert [(s, v) for s, v, _ in obs[-2:]] == [(3, 70.0), (4, 99.0)]
    finally:
        svc.close()


def test_shutdown_applies_what_waits(db_url: str, tmp_path: Path) -> None:  # noqa: F811
    svc = _service(db_url, tmp_path, 60)
    for i in range(4):
        svc.diagnose("t", _run(60, f"r{i}", agent="a"), DiagnoseOptions())
    assert _waiting(svc) == 4
    svc.close()
    again = _service(db_url, tmp_path, 60)
    try:
        assert _waiting(again) == 0
        _check_replay(again, "a", {f"r{i}" for i in range(4)})
    finally:
        again.close()


def test_two_workers_feeding_at_once_apply_each_run_once_in_order(db_url: str, tmp_path: Path) -> None:  # noqa: F811
    workers = [_service(db_url, tmp_path, 0.05) for _ in range(2)]
    jobs = [(f"{agent}{i}", agent) for i in range(30) for agent in ("a", "b")]

    def post(k: int) -> None:
        tid, agent = jobs[k]
        workers[k % 2].diagnose("t", _run(50 + k % 17, tid, agent=agent), DiagnoseOptions())

    try:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(post, range(len(jobs))))
    finally:
        for w in workers:
            w.close()
    check = _service(db_url, tmp_path, 0)
    try:
        assert _waiting(check) == 0
        for agent in ("a", "b"):
            _check_replay(check, agent, {tid for tid, a in jobs if a == agent})
    finally:
        check.close()


def test_an_idle_feeder_applies_what_a_stopped_worker_left(db_url: str, tmp_path: Path,  # noqa: F811
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import serve.services.streams as streams_service

    monkeypatch.setattr(streams_service, "IDLE_CHECK_S", 0.3)
    svc = _service(db_url, tmp_path, 0.05)
    try:
        svc.diagnose("t", _run(60, "r0", agent="a"), DiagnoseOptions())  # starts this worker's feeder
        assert _left_after_feeder(svc) == 0
        # a row another worker wrote and did not apply (killed): its diagnosis committed, its feeder gone
        with svc.stores.db.unit() as db:
            svc.stores.streams.enqueue_feed(db, "t", "a", "orphan", {"output_chars": 61.0})
        assert _waiting(svc) == 1
        assert _left_after_feeder(svc) == 0
        obs = _observations(svc, "a")["output_chars"]
        assert [(s, v, t) for s, v, t in obs] == [(0, 60.0, "r0"), (1, 61.0, "orphan")]
    finally:
        svc.close()

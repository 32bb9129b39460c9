"""The count feed (``serve/store/counters.py``, "the count feed"; revision 0024): a server's diagnosis writes
its run's count changes as one row of ``count_feed`` instead of its ``run_metrics`` row and three counter
upserts; the worker's feeder applies them with the streams' feed; a reader of the counts in the server, a
later writer of the run's counts and a worker's shutdown apply what waits first; a downgrade applies it.
On SQLite and PostgreSQL, through the service as a worker builds it."""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy import inspect

from model.core.options import DiagnoseOptions
from model.diagnosis.diagnoser import Diagnoser
from serve.services.triage import TriageService
from serve.settings import Settings
from serve.store import Stores
from serve.store.migrate import downgrade
from serve.store.tables import CountFeedRow, RunMetricRow
from serve.wiring import build_service
from tests.storefix import db_url, full_agents  # noqa: F401  (fixture)
from tests.test_metric_counters import full_totals
from tests.test_streams_agent import _run


def _service(url: str, tmp_path: Path, feed_s: float) -> TriageService:
    return build_service(Settings(data_dir=tmp_path, database_url=url, stream_feed_s=feed_s), Diagnoser())


def _agree(store: Stores) -> None:
    """The counts as a reader of the server reads them are a full read of the history."""
    got = store.reports.metrics_snapshot("t")
    got.pop("open_alarms")
    want = full_totals(store, "t")
    assert got.pop("mttr_s") == want.pop("mttr_s")
    assert got == want
    assert {k: tuple(v) for k, v in store.agents.agent_stats("t").items()} == full_agents(store, "t")


def test_a_diagnosis_defers_its_counts_and_the_feeder_applies_them(db_url: str, tmp_path: Path) -> None:  # noqa: F811
    svc = _service(db_url, tmp_path, 0.3)
    outside = Stores.at(db_url)  # another process's view (a command): it reads what is applied
    try:
        assert svc.stores.db.defer_counts and not outside.db.defer_counts
        for i in range(5):
            svc.diagnose("t", _run(60 + i, f"r{i}", agent="a"), DiagnoseOptions())
        svc.diagnose("t", _run(61, "r0", agent="a"), DiagnoseOptions())  # a re-diagnosis: its second row
        # written with the runs (one row a run and diagnosis), not applied by them
        assert outside.reports.count_rows(CountFeedRow) == 6 and outside.reports.count_rows(RunMetricRow) == 0
        deadline = time.monotonic() + 20
        while outside.reports.count_rows(CountFeedRow) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert outside.reports.count_rows(CountFeedRow) == 0 and outside.reports.count_rows(RunMetricRow) == 5  # the feeder's work
        _agree(outside)
        assert outside.agents.agent_stats("t")["a"].runs == 5
    finally:
        svc.close()
        outside.db.dispose()


def test_readers_and_writers_of_the_counts_apply_what_waits_first(db_url: str, tmp_path: Path) -> None:  # noqa: F811
    svc = _service(db_url, tmp_path, 60)  # the feeder would wait a minute
    try:
        for i in range(3):
            svc.diagnose("t", _run(60, f"r{i}", agent="a"), DiagnoseOptions())
        store = svc.stores
        assert store.reports.count_rows(CountFeedRow) == 3
        assert store.agents.agent_stats("t")["a"].runs == 3  # the server's reader applied them
        assert store.reports.count_rows(CountFeedRow) == 0
        svc.diagnose("t", _run(60, "r3", agent="a"), DiagnoseOptions())
        # a label on the run just diagnosed: its run's row is made first, then labelled
        store.labels.add_label("t", "r3", failed=True, author="ann", author_type="human")
        assert store.reports.count_rows(CountFeedRow) == 0
        assert store.agents.agent_stats("t")["a"][:2] == (4, 1)
        svc.diagnose("t", _run(60, "r4", agent="a"), DiagnoseOptions())
        assert store.traces.delete_trace("t", "r4")  # a deletion takes out what the waiting row adds
        _agree(store)
    finally:
        svc.close()


def test_shutdown_applies_the_counts_that_wait(db_url: str, tmp_path: Path) -> None:  # noqa: F811
    svc = _service(db_url, tmp_path, 60)
    for i in range(4):
        svc.diagnose("t", _run(60, f"r{i}", agent="a"), DiagnoseOptions())
    assert svc.stores.reports.count_rows(CountFeedRow) == 4
    svc.close()
    outside = Stores.at(db_url)
    try:
        assert outside.reports.count_rows(CountFeedRow) == 0 and outside.reports.count_rows(RunMetricRow) == 4
        _agree(outside)
    finally:
        outside.db.dispose()


def test_a_downgrade_applies_the_counts_that_wait(db_url: str, tmp_path: Path) -> None:  # noqa: F811
    svc = _service(db_url, tmp_path, 60)
    for i in range(3):
        svc.diagnose("t", _run(60, f"r{i}", agent="a"), DiagnoseOptions())
    svc.stores.db.on_counts_deferred = None
    svc.streams._closing.set()  # the feeder stops without applying: the rows wait for the downgrade
    outside = Stores.at(db_url)
    try:
        assert outside.reports.count_rows(CountFeedRow) == 3
        downgrade(outside.db.engine, "0023")
        assert "count_feed" not in inspect(outside.db.engine).get_table_names()
        assert outside.reports.count_rows(RunMetricRow) == 3
        _agree(outside)
        outside.db.upgrade()
    finally:
        outside.db.dispose()
        svc.stores.db.dispose()

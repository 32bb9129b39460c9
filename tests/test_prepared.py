"""serve.store.prepared.Prepared: statements run on the transaction's DBAPI connection store and read
back what SQLAlchemy's own execution does, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import bindparam, insert, select, update

from model.core.errors import StoreValueError
from serve.store import Stores
from serve.store.base import core
from serve.store.prepared import Prepared
from serve.store.tables import FailureRow, StreamRow, TraceRow
from tests.storefix import db_url, store_fixture  # noqa: F401  (fixtures)


def _trace(tid: str, when: datetime) -> dict[str, object]:
    return {"tenant_id": "acme", "id": tid, "session_id": None, "task_type": None, "created_at": when,
            "updated_at": when, "n_steps": 2, "healthy": False, "arm": "repair", "failed_at": when,
            "primary_kind": "tool_error", "model_version": "m1", "shadow": False,
            "trace": {"steps": [{"kind": "user_input", "content": "é ✓"}]}, "response": {"healthy": False},
            "policy_state": None, "steps_in_rows": False, "agent": "a"}


def test_rows_written_by_prepared_read_back_as_through_sqlalchemy(store: Stores) -> None:
    when = datetime(2026, 12, 6, 21, 0, 0, 123456, tzinfo=UTC)
    add = Prepared(insert(core(TraceRow)))
    t = core(TraceRow).c
    get = Prepared(select(t.created_at, t.trace, t.healthy, t.policy_state).where(t.tenant_id == bindparam("t")))
    with store.db.write() as db:
        add.execute(db, [_trace("t1", when), _trace("t2", when)])  # an executemany
        rows = get.execute(db, {"t": "acme"})
    assert rows == [(when, {"steps": [{"kind": "user_input", "content": "é ✓"}]}, False, None)] * 2
    assert isinstance(rows[0][2], bool)  # SQLite's 0/1 through SQLAlchemy's result processor
    with store.db.read() as db:  # the ORM reads the same row
        row = db.get(TraceRow, ("acme", "t1"))
        assert row is not None and row.created_at == when and row.trace["steps"][0]["content"] == "é ✓"


def test_column_defaults_literals_and_returning(store: Stores) -> None:
    when = datetime(2026, 12, 6, tzinfo=UTC)
    with store.db.write() as db:
        Prepared(insert(core(TraceRow))).execute(db, _trace("t1", when))
        # details (default dict) and is_signal (default False) left out: the column defaults fill them
        Prepared(insert(core(FailureRow))).execute(db, {
            "tenant_id": "acme", "trace_id": "t1", "kind": "tool_error", "severity": "high", "confidence": 0.5,
            "detector": "rules", "step": 1, "source_index": 1, "evidence": "", "tool": "", "created_at": when,
            "agent": "a"})
        s = core(StreamRow).c
        Prepared(insert(core(StreamRow))).execute(db, {
            "tenant_id": "acme", "name": "latency", "agent": "a", "detector": "cusum", "params": {}, "state": {},
            "n": 1, "alarm_open": False, "updated_at": when})
        bump = Prepared(update(core(StreamRow)).where(s.tenant_id == bindparam("t"))
                        .values(n=s.n + 1).returning(s.n))  # the 1 is a literal the statement carries
        assert bump.execute(db, {"t": "acme"}) == [(2,)]
        assert bump.execute(db, {"t": "nobody"}) == []
    with store.db.read() as db:
        f = db.scalars(select(FailureRow)).one()
        assert f.details == {} and f.is_signal is False


def test_a_refused_value_is_a_store_value_error(store: Stores) -> None:
    when = datetime(2026, 12, 6, tzinfo=UTC)
    add = Prepared(insert(core(TraceRow)))
    with store.db.write() as db:
        add.execute(db, _trace("t1", when))
    with pytest.raises(StoreValueError), store.db.write() as db:
        add.execute(db, _trace("t1", when))  # the same primary key: the driver's IntegrityError, translated
    with store.db.read() as db:  # the failed transaction rolled back; the first row stays
        assert db.scalar(select(core(TraceRow).c.id)) == "t1"


def test_a_missing_parameter_is_named() -> None:
    t = core(TraceRow).c
    q = Prepared(select(t.id).where(t.tenant_id == bindparam("t")))
    stores = Stores.at("sqlite://")
    stores.db.upgrade()
    with pytest.raises(ValueError, match="no value for t"), stores.db.read() as db:
        q.execute(db, {"x": 1})


def test_utc_datetime_binds_sqlalchemys_own_sqlite_text() -> None:
    """UTCDateTime's one-step SQLite bind (isoformat) writes the text SQLAlchemy's DateTime writes."""
    from datetime import timedelta, timezone

    from sqlalchemy import DateTime
    from sqlalchemy.dialects import sqlite

    from serve.store.tables import UTCDateTime

    d = sqlite.dialect()
    ours = UTCDateTime().bind_processor(d)
    theirs = DateTime().dialect_impl(d).bind_processor(d)
    assert ours is not None and theirs is not None
    for when in (datetime(2026, 12, 7, 0, 41, 5, 123456), datetime(2026, 12, 7), datetime(999, 1, 2, 3, 4, 5, 6),
                 datetime(2026, 12, 7, 0, 41, 5, 123456, tzinfo=UTC), datetime(5, 1, 1, tzinfo=UTC),
                 datetime(2026, 12, 7, 1, 2, 3, 40, tzinfo=timezone(timedelta(hours=-5)))):
        naive = when.astimezone(UTC).replace(tzinfo=None) if when.tzinfo else when
        assert ours(when) == theirs(naive)
    assert ours(None) is None


_JSON_VALUES = [
    {"a": [1, 0.5, -0.0, 1e-09, 1e16, None, True, "é ✓ \u0000 \"q\""], "b": {"c": []}},
    {"big": 2**64, "neg": -(2**63) - 1},  # orjson refuses (writes) or floats (reads) these: json's way
    {"nan": float("nan"), "inf": [float("inf"), None], "minf": -float("inf")},  # orjson would write null
    {"sur": "\ud800x"},  # a lone surrogate: json escapes it
    {1: "a", None: "b"},  # keys json turns into strings
    [{"id": "12345678901234567890123"}],  # a long run of digits in a string: read by json, the same
    (1, "t"),
]


@pytest.mark.parametrize("value", _JSON_VALUES)
def test_json_columns_read_back_what_json_dumps_would(value: object) -> None:
    """The store's JSON serializer (orjson, json where they differ) reads back, with either reader, the
    value json.dumps's text reads back as."""
    import json
    import math

    from serve.store.engine import json_dumps, json_loads

    def same(a: object, b: object) -> bool:  # NaN equals NaN here
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
            return math.isnan(b)
        if isinstance(a, dict) and isinstance(b, dict):
            return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
        return type(a) is type(b) and a == b

    want = json.loads(json.dumps(value))
    text = json_dumps(value)
    assert same(json_loads(text), want) and same(json.loads(text), want)
    assert same(json_loads(json.dumps(value)), want)  # rows json wrote before
    assert same(json_loads(json.dumps(value).encode()), want)  # psycopg hands bytes


def test_json_refused_as_json_refuses() -> None:
    """A value json cannot write is refused the same way (a datetime: orjson would write it)."""
    import json

    from serve.store.engine import json_dumps

    for bad in ({"t": datetime(2026, 1, 1)}, {"s": {1, 2}}):
        with pytest.raises(TypeError):
            json.dumps(bad)
        with pytest.raises(TypeError):
            json_dumps(bad)

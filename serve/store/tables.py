"""The failure-history tables (SQLAlchemy 2, declarative, typed).

Every row is keyed by tenant; every read of the stores (:class:`serve.store.Stores`) filters on it. Trace
text is stored only after redaction (:mod:`serve.redaction`). The Alembic migrations in
``serve/migrations`` create exactly these tables; a test compares the two.

Tables::

    tenants          a name per tenant, and its retention (days)
    api_keys         sha256 of each key (never the key), its prefix for display, revoked_at, operator
    traces           one diagnosed trace (redacted JSON) and its latest response, with its verdict as columns
    trace_steps      the steps of a session's trace, one row each (appends insert only)
    run_encodings    the float16 step vectors of a run (the agent model's encoder block), a chunk per write
    usage            steps imported per tenant and UTC day (the daily quota)
    failures         the failures and signals of a trace's latest diagnosis (for filtering/export)
    sessions         real-time sessions: step counters and the repair engine's state (JSON)
    recommendations  every recommendation given, with its rung, attempt and status
    outcomes         what the agent reported after carrying out a recommendation
    labels           human labels on a trace (for the dataset export)
    streams          stream-detector state per (tenant, agent, stream)
    observations     the values posted to / fed into a stream, with alarms
    stream_feed      the values of diagnosed runs still to be fed into their agent's streams (a queue)
    model_activations which registry version of the run scorer each tenant serves (newest row wins)
    ui_sessions      the console's signed-in sessions: sha256 of the cookie's token (never the token)
    run_metrics      what each run adds to the counters below (serve/store/counters.py)
    canary_counts    the canary's figures per (tenant, hour the runs started, arm), kept on write
    overview_counts  the console overview's counts per (tenant, hour the runs started, agent, verdict, kind)
    metric_totals    /metrics' whole-history counts per tenant (traces, failures, recommendations…), kept on write
    agents           each agent of a tenant: its key, the name a person gave it, how it was found, the
                     profile its runs are matched against (inferred agents), and aliases (old keys)
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    text,
    type_coerce,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Stored as naive UTC (SQLite keeps no offset), always read back as aware UTC; a naive value
    given to the store is taken as UTC."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:  # a naive time (e.g. `since=2026-11-29T10:00` from a caller) is UTC
            return value
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else as_utc(value)

    def bind_processor(self, dialect: Dialect) -> Callable[[datetime | None], Any] | None:
        """On SQLite, :meth:`process_bind_param` and SQLAlchemy's text of a datetime in one step: the same
        text (``YYYY-MM-DD HH:MM:SS.ffffff``) by ``isoformat``, ~5x faster than SQLAlchemy's ``%`` format of
        seven fields (a diagnosis binds a dozen times)."""
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)

        def process(value: datetime | None) -> str | None:
            if value is None:
                return None
            if value.tzinfo is UTC:  # the store's own times (utcnow): the text less its "+00:00"
                return value.isoformat(" ", "microseconds")[:-6]
            if value.tzinfo is not None:
                value = value.astimezone(UTC).replace(tzinfo=None)
            return value.isoformat(" ", "microseconds")
        return process


def fast_time(column: Any, dialect: str) -> Any:
    """``column`` (a :class:`UTCDateTime`) to select when many rows are read: on SQLite its stored
    text (SQLAlchemy's parser of SQLite datetimes costs ~5x :func:`datetime.fromisoformat`), to be read
    back with :func:`as_utc`; elsewhere the column itself."""
    return type_coerce(column, String) if dialect == "sqlite" else column


def as_utc(value: datetime | str) -> datetime:
    """A time selected with :func:`fast_time` (SQLite's text, naive UTC; or a datetime) as aware UTC."""
    when = datetime.fromisoformat(value) if isinstance(value, str) else value
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class Tenant(Base):
    __tablename__ = "tenants"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # retention: runs older than this many days are deleted with everything derived from them
    # (serve/store/upkeep.py); NULL keeps them (the service-wide TRIAGE_RETENTION_DAYS still applies)
    retention_days: Mapped[float | None] = mapped_column(Float, nullable=True)


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)  # the key's public prefix
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    label: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # an operator key may act on any tenant (serve/auth.py) and promote / roll back models
    operator: Mapped[bool] = mapped_column(Boolean, default=False)


class TraceRow(Base):
    __tablename__ = "traces"
    __table_args__ = (
        # a session's runs (revision 0021: those of a session only; a run without one writes no entry). A
        # tenant's runs by time are read from ix_traces_console's leading (tenant_id, created_at)
        Index("ix_traces_tenant_session", "tenant_id", "session_id", sqlite_where=text("session_id IS NOT NULL"),
              postgresql_where=text("session_id IS NOT NULL")),
        # an agent's runs, first and last seen (the agents' list: one probe each; revision 0017)
        Index("ix_traces_agent_created", "tenant_id", "agent", "created_at"),
        Index("ix_traces_agent_updated", "tenant_id", "agent", "updated_at"),
        # the console's window and the label queue read these columns alone (revision 0015): an
        # index-only scan, never the rows (whose trace and response JSON SQLite keeps inline)
        Index("ix_traces_console", "tenant_id", "created_at", "verdict", "agent", "primary_kind", "id",
              "failure_probability", "judged_threshold", "finding_margin"),
        # the rows the verdict backfill has still to fill (empty once it is done: costs a write nothing)
        Index("ix_traces_unfilled", "tenant_id", "id", sqlite_where=text("verdict IS NULL"),
              postgresql_where=text("verdict IS NULL")),
        # the label queue's random order (revision 0018): a page is a LIMIT read from a reviewer's start
        Index("ix_traces_review", "tenant_id", "review_key", "id"),
        # the rows whose review_key the backfill has still to fill (empty once it is done)
        Index("ix_traces_unkeyed", "tenant_id", "id", sqlite_where=text("review_key IS NULL"),
              postgresql_where=text("review_key IS NULL")),
    )

    tenant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    session_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    task_type: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    n_steps: Mapped[int] = mapped_column(Integer, default=0)
    healthy: Mapped[bool] = mapped_column(Boolean, default=True)
    primary_kind: Mapped[str | None] = mapped_column(String(64), nullable=True)
    model_version: Mapped[str] = mapped_column(String(100), default="")
    shadow: Mapped[bool] = mapped_column(Boolean, default=False)
    trace: Mapped[dict[str, Any]] = mapped_column(JSON)  # redacted native Trace JSON
    response: Mapped[dict[str, Any]] = mapped_column(JSON)  # the latest DiagnosisResponse
    # The repair policy's state of a trace sent without a session id (sessions keep theirs).
    policy_state: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # A session's trace keeps its steps in trace_steps (an append writes only the new ones); the
    # ``trace`` column then holds everything else, with ``"steps": []``.
    steps_in_rows: Mapped[bool] = mapped_column(Boolean, default=False)
    # The canary arm of the run (serve/services/canary.py): "repair" / "shadow"; NULL when the caller chose
    # shadow itself. failed_at: when a diagnosis of this run first found a failure (kept).
    arm: Mapped[str | None] = mapped_column(String(8), nullable=True)
    failed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # The agent that ran it (model/core/agents.py): the key of its agent model. Rows stored before
    # revision 0007 got their task type, else "_pool" (what the resolution gives them).
    agent: Mapped[str] = mapped_column(String(200), default="_pool", server_default="_pool")
    # The diagnosis' verdict and the label queue's margin parts (serve/store/verdict.py run_columns),
    # written with every diagnosis; NULL verdict: a row stored before revision 0015, not backfilled yet.
    verdict: Mapped[str | None] = mapped_column(String(8), nullable=True)
    failure_probability: Mapped[float | None] = mapped_column(Float, nullable=True)
    judged_threshold: Mapped[float | None] = mapped_column(Float, nullable=True)
    finding_margin: Mapped[float | None] = mapped_column(Float, nullable=True)
    # The run's place in the label queue's random order (serve/store/verdict.py queue_key of its id),
    # written with every diagnosis; NULL: a row stored before revision 0018, not backfilled yet.
    review_key: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class TraceStepRow(Base):
    """One (redacted) step of a session's trace: appends insert rows, never rewrite the trace."""

    __tablename__ = "trace_steps"

    tenant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    trace_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    step: Mapped[dict[str, Any]] = mapped_column(JSON)


class RunEncodingRow(Base):
    """The static encoder's vectors of steps ``first`` … ``first + n - 1`` of a run, as its agent model
    read them (:mod:`serve.store.encodings`): a whole diagnosis writes one chunk from step 0, a session
    append one for its new steps. Deleted with the run; ``encoder`` names the encoder's version."""

    __tablename__ = "run_encodings"

    tenant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    trace_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    first: Mapped[int] = mapped_column(Integer, primary_key=True)
    n: Mapped[int] = mapped_column(Integer)
    encoder: Mapped[str] = mapped_column(String(32))
    dim: Mapped[int] = mapped_column(Integer)
    vectors: Mapped[bytes] = mapped_column(LargeBinary)  # n × dim float16, little-endian (NaN: a system step)


class UsageRow(Base):
    """Steps a tenant imported on a UTC day (the daily quota, shared by every worker)."""

    __tablename__ = "usage"

    tenant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    day: Mapped[str] = mapped_column(String(10), primary_key=True)  # YYYY-MM-DD
    steps: Mapped[int] = mapped_column(BigInteger, default=0)


class FailureRow(Base):
    __tablename__ = "failures"
    __table_args__ = (
        Index("ix_failures_trace", "tenant_id", "trace_id"),
        # the runs of a kind (the runs page's filter and its total: an index-only read, revision 0017)
        Index("ix_failures_tenant_kind", "tenant_id", "kind", "is_signal", "trace_id"),
        Index("ix_failures_tenant_created", "tenant_id", "created_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(String(64))
    trace_id: Mapped[str] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(64))
    is_signal: Mapped[bool] = mapped_column(Boolean, default=False)
    severity: Mapped[str] = mapped_column(String(16))
    confidence: Mapped[float] = mapped_column(Float)
    detector: Mapped[str] = mapped_column(String(100))
    step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    source_index: Mapped[int | None] = mapped_column(Integer, nullable=True)
    evidence: Mapped[str] = mapped_column(Text, default="")
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # the tool the failure concerns (details.tool, else the tool at its step); "" none; NULL: a row
    # written before the column (model/diagnosis/patterns.py reads those from the trace)
    tool: Mapped[str | None] = mapped_column(String(200), nullable=True)
    # the trace's created_at and agent (traces.agent, the run's resolved agent), copied so that the
    # patterns of a window read this table alone (NULL: rows written before the columns, filled by
    # migration 0010)
    created_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    agent: Mapped[str | None] = mapped_column(String(200), nullable=True)


class SessionRow(Base):
    __tablename__ = "sessions"

    tenant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    trace_id: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    n_steps: Mapped[int] = mapped_column(Integer, default=0)
    next_source_index: Mapped[int] = mapped_column(Integer, default=0)
    version: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # the repair engine's state


class RecommendationRow(Base):
    __tablename__ = "recommendations"
    __table_args__ = (
        Index("ix_recs_tenant_session", "tenant_id", "session_id"),
        Index("ix_recs_tenant_created", "tenant_id", "created_at"),
        Index("ix_recs_tenant_trace", "tenant_id", "trace_id"),
    )

    tenant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    trace_id: Mapped[str] = mapped_column(String(128))
    session_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    failure_key: Mapped[str | None] = mapped_column(String(200), nullable=True)
    kind: Mapped[str | None] = mapped_column(String(64), nullable=True)
    strategy: Mapped[str] = mapped_column(String(64))
    rung: Mapped[int] = mapped_column(Integer, default=0)
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    status: Mapped[str] = mapped_column(String(16), default="open")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    body: Mapped[dict[str, Any]] = mapped_column(JSON)  # the Recommendation as given


class OutcomeRow(Base):
    __tablename__ = "outcomes"
    __table_args__ = (Index("ix_outcomes_tenant_rec", "tenant_id", "recommendation_id"),
                      Index("ix_outcomes_tenant_trace", "tenant_id", "trace_id"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(String(64))
    recommendation_id: Mapped[str] = mapped_column(String(64))
    trace_id: Mapped[str] = mapped_column(String(128))
    strategy: Mapped[str] = mapped_column(String(64))
    success: Mapped[bool] = mapped_column(Boolean)
    duration_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    cost: Mapped[float | None] = mapped_column(Float, nullable=True)
    note: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class LabelRow(Base):
    __tablename__ = "labels"
    __table_args__ = (
        Index("ix_labels_trace", "tenant_id", "trace_id"),
        # an author's labels still counted, with their runs (revision 0022: the label queue's count, an undo)
        Index("ix_labels_author", "tenant_id", "author", "trace_id", sqlite_where=text("withdrawn_at IS NULL"),
              postgresql_where=text("withdrawn_at IS NULL")),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(String(64))
    trace_id: Mapped[str] = mapped_column(String(128))
    kind: Mapped[str | None] = mapped_column(String(64), nullable=True)  # None: no failure kind said
    step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    source_index: Mapped[int | None] = mapped_column(Integer, nullable=True)
    author: Mapped[str] = mapped_column(String(200), default="")
    # the run-level verdict (True: the run failed); NULL only in rows no code writes any more
    failed: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    author_type: Mapped[str] = mapped_column(String(16), default="human", server_default="human")  # or "checker"
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # set when its author withdrew it (undo): kept, but no reader counts it any more
    withdrawn_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class StreamRow(Base):
    __tablename__ = "streams"

    tenant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    # The agent whose runs feed it (model/core/agents.py); "" = every agent of the tenant (posted values).
    # Rows stored before revision 0008 were keyed by task type: that task type, "default" → "_pool".
    agent: Mapped[str] = mapped_column(String(200), primary_key=True)
    detector: Mapped[str] = mapped_column(String(64))
    params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    state: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    n: Mapped[int] = mapped_column(Integer, default=0)
    alarm_open: Mapped[bool] = mapped_column(Boolean, default=False)
    alarm: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ObservationRow(Base):
    __tablename__ = "observations"
    __table_args__ = (
        # (its index serves the stream's reads: revision 0017 dropped an index of the same columns)
        UniqueConstraint("tenant_id", "stream", "agent", "seq", name="uq_obs_seq"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(String(64))
    stream: Mapped[str] = mapped_column(String(200))
    agent: Mapped[str] = mapped_column(String(200))
    seq: Mapped[int] = mapped_column(Integer)  # 0-based index within the stream
    value: Mapped[float] = mapped_column(Float)
    trace_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    alarm: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class StreamFeedRow(Base):
    """The values a diagnosed run feeds into its agent's streams (stream name → value), written with the run
    and taken out by the one that applies them (:meth:`serve.services.streams.Streams.drain`), in ``id`` order."""

    __tablename__ = "stream_feed"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(String(64))
    agent: Mapped[str] = mapped_column(String(200))
    trace_id: Mapped[str] = mapped_column(String(128))
    values: Mapped[dict[str, float]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class CountFeedRow(Base):
    """What a diagnosis changes of its run's counts (``run_metrics`` and the counters of
    :mod:`serve.store.counters`), written with the run and applied after it in ``id`` order, once, by the
    worker's feeder or by the first writer or reader of the counts that finds it waiting
    (:func:`serve.store.counters.apply_count_feed`). ``ops``: the run's count changes of that transaction,
    in order (``["run", {…}]``: a diagnosis stored; ``["rec", strategy, n]``: its recommendations)."""

    __tablename__ = "count_feed"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(String(64))
    trace_id: Mapped[str] = mapped_column(String(128))
    ops: Mapped[list[Any]] = mapped_column(JSON)


class ModelActivationRow(Base):
    """One promotion or rollback of a tenant's agent model (``model/scoring/agent_registry.py`` holds the artefacts).

    ``agent`` NULL: an activation of a tenant-wide run scorer recorded before revision 0007; kept as
    history, no longer served (agent models replaced it)."""

    __tablename__ = "model_activations"
    __table_args__ = (
        Index("ix_model_activations_tenant", "tenant_id", "id"),
        Index("ix_model_activations_agent", "tenant_id", "agent", "id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(String(64))
    agent: Mapped[str | None] = mapped_column(String(200), nullable=True)
    version: Mapped[str] = mapped_column(String(128))
    activated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    actor: Mapped[str] = mapped_column(String(200), default="")
    action: Mapped[str] = mapped_column(String(16))  # "promote" or "rollback"


class UISessionRow(Base):
    """One console sign-in (serve/auth.py): the browser holds a random token in a cookie; the
    store keeps its sha256, the API key it was opened with (revoking the key ends the session) and
    the session's CSRF token."""

    __tablename__ = "ui_sessions"
    __table_args__ = (Index("ix_ui_sessions_key", "key_id"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # sha256 hex of the cookie's token
    tenant_id: Mapped[str] = mapped_column(String(64))
    key_id: Mapped[str] = mapped_column(String(32))
    csrf: Mapped[str] = mapped_column(String(64))
    # an operator's session acting on another tenant (None: the key's own)
    acting_tenant: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


#: The bounds (seconds) of the canary's time-to-recovery histogram: ``canary_counts.rec_le_<bound>``
#: counts the recovered runs whose recovery took at most that long (cumulative, as Prometheus' ``le``).
RECOVERY_BOUNDS: tuple[int, ...] = (10, 30, 60, 300, 900, 3600, 14400, 86400)


class RunMetricRow(Base):
    """What one run (a stored trace) adds to ``canary_counts`` and ``metric_totals``
    (:mod:`serve.store.counters`): each write that changes the run changes the counters by the
    difference. One row per trace, written with it and deleted with it (revision 0012 filled the rows
    of traces stored before)."""

    __tablename__ = "run_metrics"

    tenant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    trace_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    hour: Mapped[int] = mapped_column(Integer)  # the run's created_at, in whole hours since 1970 (UTC)
    arm: Mapped[str | None] = mapped_column(String(8), nullable=True)
    failed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)  # = traces.failed_at
    healthy: Mapped[bool] = mapped_column(Boolean, default=True)  # = traces.healthy
    # failed and healthy again: seconds from failed_at to the diagnosis that found it healthy
    recovery_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    labelled: Mapped[bool] = mapped_column(Boolean, default=False)  # has an effective run-level label
    succeeded: Mapped[bool] = mapped_column(Boolean, default=False)  # … which says failed: false
    kinds: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # failures (not signals) by kind
    agent: Mapped[str | None] = mapped_column(String(200), nullable=True)  # = traces.agent (revision 0017)
    # what the run adds to overview_counts (revision 0020): = traces.verdict and traces.primary_kind, and its
    # repairs (recommendations, ``continue`` left out), outcomes, and of those the successful
    verdict: Mapped[str] = mapped_column(String(8), default="unknown", server_default="unknown")
    kind: Mapped[str | None] = mapped_column(String(64), nullable=True)
    repairs: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    outcomes: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    outcomes_ok: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class CanaryCountRow(Base):
    """The canary's figures (:mod:`serve.services.canary`) of the runs a tenant started in one hour, per
    arm; incremented in the transaction of each write that changes them (``n = n + delta``)."""

    __tablename__ = "canary_counts"
    __table_args__ = (Index("ix_canary_counts_hour", "hour"),)

    tenant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    hour: Mapped[int] = mapped_column(Integer, primary_key=True)
    arm: Mapped[str] = mapped_column(String(8), primary_key=True)
    runs: Mapped[int] = mapped_column(BigInteger, default=0)
    failed: Mapped[int] = mapped_column(BigInteger, default=0)
    recovered: Mapped[int] = mapped_column(BigInteger, default=0)
    labelled: Mapped[int] = mapped_column(BigInteger, default=0)
    succeeded: Mapped[int] = mapped_column(BigInteger, default=0)
    recovery_s: Mapped[float] = mapped_column(Float, default=0.0)  # sum over the recovered runs
    rec_le_10: Mapped[int] = mapped_column(BigInteger, default=0)
    rec_le_30: Mapped[int] = mapped_column(BigInteger, default=0)
    rec_le_60: Mapped[int] = mapped_column(BigInteger, default=0)
    rec_le_300: Mapped[int] = mapped_column(BigInteger, default=0)
    rec_le_900: Mapped[int] = mapped_column(BigInteger, default=0)
    rec_le_3600: Mapped[int] = mapped_column(BigInteger, default=0)
    rec_le_14400: Mapped[int] = mapped_column(BigInteger, default=0)
    rec_le_86400: Mapped[int] = mapped_column(BigInteger, default=0)


class OverviewCountRow(Base):
    """The console overview's counts of the runs a tenant started in one hour (revision 0020), per agent,
    verdict and primary kind ("" for none): the runs, their repairs (``continue`` left out), outcomes and
    successful outcomes; incremented in the transaction of each write that changes them, as
    ``canary_counts`` (:mod:`serve.store.counters`)."""

    __tablename__ = "overview_counts"

    tenant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    hour: Mapped[int] = mapped_column(Integer, primary_key=True)
    agent: Mapped[str] = mapped_column(String(200), primary_key=True)
    verdict: Mapped[str] = mapped_column(String(8), primary_key=True)
    kind: Mapped[str] = mapped_column(String(64), primary_key=True)
    runs: Mapped[int] = mapped_column(BigInteger, default=0)
    repairs: Mapped[int] = mapped_column(BigInteger, default=0)
    outcomes: Mapped[int] = mapped_column(BigInteger, default=0)
    succeeded: Mapped[int] = mapped_column(BigInteger, default=0)


class MetricTotalRow(Base):
    """A whole-history count per tenant, kept on write: ``/metrics``' (``name``: traces, failures,
    recommendations, outcomes_ok, outcomes_failed, recoveries; ``key``: the kind or strategy, "" for
    none) and the agents' list's (``agent_runs``, ``agent_labelled``: its runs, and those with a label
    not withdrawn; ``key``: the agent; revision 0017). ``total``: a sum that goes with it (the
    recoveries' seconds)."""

    __tablename__ = "metric_totals"

    tenant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    n: Mapped[int] = mapped_column(BigInteger, default=0)
    total: Mapped[float] = mapped_column(Float, default=0.0)


class AgentRow(Base):
    """One agent of a tenant (:mod:`serve.services.agents`, docs/agents.md).

    ``key`` is what every row keyed by agent holds (traces, failures, streams, observations, model
    activations). ``alias_of`` set: an old key (renamed or merged away) whose later runs and cached
    references follow to that key; it has no runs of its own any more. ``profile``: what the agent's
    runs show (:class:`model.core.identity.AgentProfile` JSON), matched against runs that name no
    agent; ``None`` for named agents nobody merged or split. ``source``: how the agent was first
    found (``option``, ``span``, ``task_type``, ``inferred``) or made (``split``)."""

    __tablename__ = "agents"
    __table_args__ = (Index("ix_agents_tenant_alias", "tenant_id", "alias_of"),)

    tenant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    source: Mapped[str] = mapped_column(String(16))
    profile: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    n_runs: Mapped[int] = mapped_column(Integer, default=0)
    alias_of: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


__all__ = [
    "RECOVERY_BOUNDS",
    "AgentRow",
    "ApiKey",
    "Base",
    "CanaryCountRow",
    "CountFeedRow",
    "FailureRow",
    "LabelRow",
    "MetricTotalRow",
    "ModelActivationRow",
    "ObservationRow",
    "OutcomeRow",
    "OverviewCountRow",
    "RecommendationRow",
    "RunEncodingRow",
    "RunMetricRow",
    "SessionRow",
    "StreamFeedRow",
    "StreamRow",
    "Tenant",
    "TraceRow",
    "TraceStepRow",
    "UISessionRow",
    "UsageRow",
    "as_utc",
    "fast_time",
    "utcnow",
]

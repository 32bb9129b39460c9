"""agents: each agent of a tenant (key, name, source, profile, aliases); the pool's runs get inferred agents

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06 06:00:00

Until this revision every run of a tenant that named no agent (no caller's name, no root agent
span, no task type) was keyed to one pool, ``_pool``: one stream, one agent model, one label queue
for every unnamed agent (issue 31). From here on such a run gets an agent inferred from what it shows
of it (serve/services/agents.py, docs/agents.md).

This revision creates the ``agents`` table and gives the stored ``_pool`` runs inferred agents: it
reads them oldest first and matches each against the profiles made so far, with the inference of
**model.core.identity** (imported, not copied: a profile written here must be one the running
service reads), creating an agent when none matches. Then the rows keyed by agent follow: the runs'
``traces.agent`` and ``failures.agent``; the ``_pool`` streams' observations move to their run's
agent (numbered again in their order) and each new stream starts its warm-up again (its detector
state empty), since the pool's baseline mixed agents; a ``_pool`` stream left with no observation
is deleted. Model activations are not touched (no agent model was served to ``_pool``: retrain never
fitted it). Every other agent the history names gets a row (source ``option``: how it was named is
not stored).

Downgrade: the inferred agents' runs and failures go back to ``_pool``; their streams stay under
their keys (the pool's merged baseline is not rebuilt) and the table is dropped.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op
from pydantic import ValidationError

from model.core.identity import AgentProfile, assign, new_agent_key, new_profile, signature
from model.core.schema import Trace

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

POOL = "_pool"

traces = sa.table("traces", sa.column("tenant_id", sa.String), sa.column("id", sa.String),
                  sa.column("agent", sa.String), sa.column("trace", sa.JSON), sa.column("steps_in_rows", sa.Boolean),
                  sa.column("created_at", sa.DateTime))
trace_steps = sa.table("trace_steps", sa.column("tenant_id", sa.String), sa.column("trace_id", sa.String),
                       sa.column("idx", sa.Integer), sa.column("step", sa.JSON))
failures = sa.table("failures", sa.column("tenant_id", sa.String), sa.column("trace_id", sa.String),
                    sa.column("agent", sa.String))
streams = sa.table("streams", sa.column("tenant_id", sa.String), sa.column("name", sa.String),
                   sa.column("agent", sa.String), sa.column("detector", sa.String), sa.column("params", sa.JSON),
                   sa.column("state", sa.JSON), sa.column("n", sa.Integer), sa.column("alarm_open", sa.Boolean),
                   sa.column("alarm", sa.JSON), sa.column("updated_at", sa.DateTime))
observations = sa.table("observations", sa.column("id", sa.Integer), sa.column("tenant_id", sa.String),
                        sa.column("stream", sa.String), sa.column("agent", sa.String), sa.column("seq", sa.Integer),
                        sa.column("trace_id", sa.String))
agents = sa.table("agents", sa.column("tenant_id", sa.String), sa.column("key", sa.String),
                  sa.column("name", sa.String), sa.column("source", sa.String), sa.column("profile", sa.JSON),
                  sa.column("n_runs", sa.Integer), sa.column("alias_of", sa.String),
                  sa.column("created_at", sa.DateTime), sa.column("updated_at", sa.DateTime))


def _trace(conn: Any, tenant: str, tid: str, body: Any, in_rows: bool) -> Trace:
    data = dict(body) if isinstance(body, dict) else {}
    if in_rows:
        data["steps"] = [r[0] for r in conn.execute(
            sa.select(trace_steps.c.step).where(trace_steps.c.tenant_id == tenant, trace_steps.c.trace_id == tid)
            .order_by(trace_steps.c.idx))]
    try:
        return Trace.model_validate(data)
    except ValidationError:  # a stored trace the schema no longer reads: it shows nothing of its agent
        return Trace(id=tid)


def _infer_pool(conn: Any, now: datetime) -> None:
    rows = conn.execute(sa.select(traces.c.tenant_id, traces.c.id, traces.c.trace, traces.c.steps_in_rows)
                        .where(traces.c.agent == POOL).order_by(traces.c.tenant_id, traces.c.created_at, traces.c.id)).all()
    by_tenant: dict[str, list[Any]] = defaultdict(list)
    for r in rows:
        by_tenant[r[0]].append(r)
    for tenant, runs in by_tenant.items():
        profiles: dict[str, AgentProfile] = {}
        moved: dict[str, str] = {}
        for _, tid, body, in_rows in runs:
            sig = signature(_trace(conn, tenant, tid, body, bool(in_rows)))
            if sig.empty:  # nothing to tell its agent by: it stays where it is (model/core/agents.py)
                continue
            key, _ = assign(sig, profiles)
            if key is None:
                key = base = new_agent_key(sig)
                n = 1
                while key in profiles:
                    n += 1
                    key = f"{base}-{n}"
                profiles[key] = new_profile(sig, profiles)
            else:
                profiles[key].update(sig)
            moved[tid] = key
        for key, prof in profiles.items():
            conn.execute(agents.insert().values(tenant_id=tenant, key=key, name=None, source="inferred",
                                                profile=prof.to_json(), n_runs=prof.n_runs, alias_of=None,
                                                created_at=now, updated_at=now))
        for tid, key in moved.items():
            conn.execute(traces.update().where(traces.c.tenant_id == tenant, traces.c.id == tid).values(agent=key))
            conn.execute(failures.update().where(failures.c.tenant_id == tenant, failures.c.trace_id == tid)
                         .values(agent=key))
        _move_streams(conn, tenant, moved, now)


def _move_streams(conn: Any, tenant: str, moved: dict[str, str], now: datetime) -> None:
    pool_streams = conn.execute(sa.select(streams.c.name, streams.c.detector, streams.c.params)
                                .where(streams.c.tenant_id == tenant, streams.c.agent == POOL)).all()
    for name, detector, params in pool_streams:
        obs = conn.execute(sa.select(observations.c.id, observations.c.trace_id)
                           .where(observations.c.tenant_id == tenant, observations.c.stream == name,
                                  observations.c.agent == POOL).order_by(observations.c.seq)).all()
        counts: dict[str, int] = defaultdict(int)
        left = 0
        for oid, tid in obs:
            key = moved.get(tid) if tid is not None else None
            if key is None:
                left += 1
                continue
            conn.execute(observations.update().where(observations.c.id == oid).values(agent=key, seq=counts[key]))
            counts[key] += 1
        for key, n in counts.items():
            conn.execute(streams.insert().values(tenant_id=tenant, name=name, agent=key, detector=detector,
                                                 params=params or {}, state={}, n=n, alarm_open=False, alarm=None,
                                                 updated_at=now))
        if not left:
            conn.execute(streams.delete().where(streams.c.tenant_id == tenant, streams.c.name == name,
                                                streams.c.agent == POOL))


def upgrade() -> None:
    op.create_table(
        "agents",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("profile", sa.JSON(), nullable=True),
        sa.Column("n_runs", sa.Integer(), nullable=False),
        sa.Column("alias_of", sa.String(length=200), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "key"),
    )
    op.create_index("ix_agents_tenant_alias", "agents", ["tenant_id", "alias_of"], unique=False)
    conn = op.get_bind()
    now = datetime.now(UTC).replace(tzinfo=None)
    _infer_pool(conn, now)
    named = conn.execute(sa.select(traces.c.tenant_id, traces.c.agent).where(traces.c.agent != POOL).distinct()).all()
    have = {(t, k) for t, k in conn.execute(sa.select(agents.c.tenant_id, agents.c.key))}
    for tenant, key in named:
        if (tenant, key) not in have:
            conn.execute(agents.insert().values(tenant_id=tenant, key=key, name=None, source="option", profile=None,
                                                n_runs=0, alias_of=None, created_at=now, updated_at=now))


def downgrade() -> None:
    conn = op.get_bind()
    inferred = conn.execute(sa.select(agents.c.tenant_id, agents.c.key).where(agents.c.source == "inferred")).all()
    for tenant, key in inferred:
        conn.execute(traces.update().where(traces.c.tenant_id == tenant, traces.c.agent == key).values(agent=POOL))
        conn.execute(failures.update().where(failures.c.tenant_id == tenant, failures.c.agent == key).values(agent=POOL))
    op.drop_index("ix_agents_tenant_alias", table_name="agents")
    op.drop_table("agents")

"""rate_buckets: the request-rate buckets every replica on one PostgreSQL spends (serve/store/limits.py)

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06 21:30:00

Several ``triage serve`` replicas on one PostgreSQL hold a key's and a tenant's request rate together
(there used to be a setting, ``TRIAGE_RATE_LIMIT_REPLICAS``, that split the rates over a number of servers
given by hand). A bucket is a row (its theoretical arrival time, epoch seconds on the database's clock);
the function ``triage_rate_take`` spends the buckets of one request in one round trip. The table exists on
SQLite too (one schema for both engines), where nothing uses it. The function is copied here from
serve/store/limits.py as of this revision: a migration must not change when the code does.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

TAKE_FUNCTION = """
CREATE OR REPLACE FUNCTION triage_rate_take(names text[], periods float8[], bursts float8[],
                                            OUT refused int, OUT wait float8) AS $$
DECLARE
    now_s float8 := extract(epoch from clock_timestamp());
    cur float8;
    nxt float8;
BEGIN
    refused := -1;
    wait := 0.0;
    FOR i IN 1 .. coalesce(array_length(names, 1), 0) LOOP
        SELECT tat INTO cur FROM rate_buckets WHERE name = names[i] FOR UPDATE;
        IF NOT FOUND THEN
            INSERT INTO rate_buckets (name, tat) VALUES (names[i], now_s) ON CONFLICT (name) DO NOTHING;
            SELECT tat INTO cur FROM rate_buckets WHERE name = names[i] FOR UPDATE;
        END IF;
        nxt := greatest(cur, now_s) + periods[i];
        IF nxt - now_s > bursts[i] * periods[i] + 1e-9 THEN
            refused := i - 1;
            wait := nxt - now_s - bursts[i] * periods[i];
            RETURN;
        END IF;
        UPDATE rate_buckets SET tat = nxt WHERE name = names[i];
    END LOOP;
END
$$ LANGUAGE plpgsql
"""


def upgrade() -> None:
    op.create_table(
        "rate_buckets",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("tat", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(TAKE_FUNCTION)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS triage_rate_take(text[], float8[], float8[])")
    op.drop_table("rate_buckets")

"""Alembic environment: the URL or an open connection comes from the caller, never from a file.

:func:`serve.store.migrate.upgrade` passes an open connection in ``config.attributes``; the
``alembic`` command line may pass ``-x url=…`` instead.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from serve.store.tables import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: object) -> None:
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=target_metadata,
        render_as_batch=True,  # SQLite cannot ALTER most things; batch mode copies the table
        compare_type=True,
        # PostgreSQL: each revision in its own transaction (serve/store/migrate.py: an index built concurrently)
        transaction_per_migration=bool(config.attributes.get("transaction_per_migration")),
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("pass the database URL: alembic -x url=sqlite:///.triage/triage.db upgrade head")
    if context.is_offline_mode():
        context.configure(url=url, target_metadata=target_metadata, literal_binds=True)
        with context.begin_transaction():
            context.run_migrations()
    else:
        engine = create_engine(url)
        with engine.begin() as conn:
            _run(conn)

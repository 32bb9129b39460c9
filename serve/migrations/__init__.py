"""Alembic migrations of the failure-history store (run by :func:`serve.store.migrate.upgrade`)."""

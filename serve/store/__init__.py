"""The failure-history store: SQLAlchemy models, Alembic migrations, and the repository.

>>> from serve.settings import Settings
>>> store = open_store(Settings(database_url="sqlite://"))
>>> store.ping()
True
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from serve.store.repository import Store, TracePage, check_tenant_name

if TYPE_CHECKING:
    from serve.settings import Settings


def open_store(settings: Settings, *, migrate: bool = True) -> Store:
    """The store the settings name, migrated to head (what the app and the CLI use)."""
    store = Store(settings.resolved_database_url, busy_timeout_s=settings.db_busy_timeout_s)
    if migrate:
        store.upgrade()
    return store


__all__ = ["Store", "TracePage", "check_tenant_name", "open_store"]

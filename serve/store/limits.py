"""Request-rate buckets kept in PostgreSQL: every replica and worker on one database spends the same ones.

With the store on PostgreSQL the service may run as several replicas behind a load balancer; a key's
rate must then hold over all of them, with no setting that says how many there are. Each bucket is
one row of ``rate_buckets`` holding its *theoretical arrival time* (``tat``, epoch seconds on the
database's clock: the generic cell rate algorithm, a token bucket in one number). Taking a token is
one call of the function ``triage_rate_take`` (made by migration 0016), which for each bucket in turn
locks its row, and either moves ``tat`` on by one period (granted) or leaves it and says how long
until the next token (refused; the buckets after it are not spent). One round trip a request, the
row locked for microseconds; the database's clock is the only clock, so the replicas' clocks never
matter.

A bucket with ``rate`` tokens a second and a burst of ``burst`` has the period ``T = 1/rate`` and
grants a request at ``now`` when ``max(tat, now) + T - now <= burst * T``: ``burst`` requests at
once from a full bucket, then one every ``T``. A row whose ``tat`` has passed is a full bucket,
the same as no row: :meth:`LimitStore.sweep` deletes those an hour old.

SQLite has no use for it (one machine: the workers share :mod:`serve.ratetable`'s table); the table
exists there too, so that both engines have one schema.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Float, String, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Mapped, mapped_column

from model.core.errors import StoreError, StoreUnavailableError
from serve.store.base import Database, StoreBase, store_error
from serve.store.tables import Base


class RateBucketRow(Base):
    """One request-rate bucket shared by every server on the database (PostgreSQL only)."""

    __tablename__ = "rate_buckets"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)  # "k:<tenant>\0<caller>" or "t:<tenant>"
    tat: Mapped[float] = mapped_column(Float, nullable=False)  # epoch seconds, the database's clock


#: ``triage_rate_take`` is made by migration 0016 (serve/migrations/versions/0016_rate_buckets.py).
_TAKE = "SELECT refused, wait FROM triage_rate_take(%s, %s, %s)"
#: After a failed call, the next ones fail at once for this long (seconds) instead of each waiting its timeout.
RETRY_S = 1.0


class LimitStore(StoreBase):
    """The shared request-rate buckets (:mod:`serve.store.limits`); PostgreSQL only.

    :meth:`take` runs on a connection of its own per process (not the pool's: a request's check must not
    wait for a pooled connection, nor hold one), autocommit, the statement prepared once; calls queue on
    a lock (about 0.2 ms each). ``timeout_s`` bounds the statement and the connect; after a failure the
    calls fail at once for :data:`RETRY_S`.

    >>> from serve.store import Stores
    >>> Stores.at("sqlite://").limits.available
    False
    """

    def __init__(self, db: Database, *, timeout_s: float = 2.0) -> None:
        super().__init__(db)
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._conn: Any = None
        self._failed_until = 0.0

    @property
    def available(self) -> bool:
        """Whether this database keeps the buckets (PostgreSQL)."""
        return self.dialect == "postgresql"

    def _connect(self) -> Any:
        import psycopg

        url = self.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        ms = max(1, int(self.timeout_s * 1000))
        return psycopg.connect(url, autocommit=True, connect_timeout=max(1, int(self.timeout_s + 0.999)),
                               options=f"-c statement_timeout={ms} -c lock_timeout={ms}",
                               application_name="triage-rate-limit")

    def take(self, buckets: Sequence[tuple[str, float, float]]) -> tuple[int, float]:
        """Take one token of each ``(name, rate, burst)`` in order, in one round trip.

        Returns ``(-1, 0.0)`` when every one was granted, else ``(index, wait)`` of the first empty
        bucket (the seconds until it has a token; the buckets after it were not spent, those before
        it were). Raises :class:`~model.core.errors.StoreUnavailableError` when the database does
        not answer within ``timeout_s`` (the connection is made again at the next call),
        :class:`~model.core.errors.StoreError` on SQLite.
        """
        import psycopg

        if not self.available:
            raise StoreError("the shared rate-limit buckets need PostgreSQL (SQLite servers share serve/ratetable.py's)")
        if not buckets:
            return -1, 0.0
        params = ([b[0][:200] for b in buckets], [1.0 / b[1] for b in buckets], [max(1.0, b[2]) for b in buckets])
        with self._lock:
            if time.monotonic() < self._failed_until:  # the calls queued behind a failure do not wait in turn
                raise StoreUnavailableError("the shared rate-limit buckets did not answer a moment ago")
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                row = self._conn.execute(_TAKE, params, prepare=True).fetchone()
            except psycopg.Error as exc:
                self._close()
                self._failed_until = time.monotonic() + RETRY_S
                raise StoreUnavailableError(f"the shared rate-limit buckets did not answer ({type(exc).__name__})") from exc
        assert row is not None
        return int(row[0]), float(row[1])

    def _close(self) -> None:
        import psycopg

        if self._conn is not None:
            with contextlib.suppress(OSError, psycopg.Error):  # a broken connection may fail to close: it is gone either way
                self._conn.close()
            self._conn = None

    def close(self) -> None:
        """Close :meth:`take`'s connection (it is made again when needed)."""
        with self._lock:
            self._close()

    def sweep(self, older_than_s: float = 3600.0) -> int:
        """Delete the buckets full again for ``older_than_s`` (the same as no row); returns how many."""
        if not self.available:
            return 0
        try:
            with self.engine.begin() as conn:
                res = conn.execute(text("DELETE FROM rate_buckets WHERE tat < extract(epoch from clock_timestamp()) - :s"),
                                   {"s": older_than_s})
        except SQLAlchemyError as exc:
            raise store_error(exc, "sweeping the rate-limit buckets of") from exc
        return int(res.rowcount or 0)


__all__ = ["LimitStore", "RateBucketRow"]

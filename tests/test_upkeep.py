"""The store upkeep's lock (:meth:`serve.store.base.Database.alone`): of the processes sharing a store,
one at a time runs the backfills and retention, on SQLite files and on PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from serve.store import Stores
from tests.storefix import db_url, store_fixture  # noqa: F401  (fixtures)


@pytest.fixture
def other(store: Stores) -> Iterator[Stores]:
    """A second worker's stores on the same database (its own engine and connections)."""
    s = Stores.at(store.db.url)
    try:
        yield s
    finally:
        s.db.dispose()


def test_one_process_at_a_time_holds_the_upkeep(store: Stores, other: Stores) -> None:
    with store.db.alone("upkeep") as mine:
        assert mine
        with other.db.alone("upkeep") as theirs:
            assert not theirs  # held: skipped, not waited for
        with other.db.alone("another") as theirs:
            assert theirs  # another name is another lock
    with other.db.alone("upkeep") as theirs:
        assert theirs  # released at the block's end


def test_the_lock_goes_with_a_process_that_dies_holding_it(store: Stores, other: Stores) -> None:
    holder = textwrap.dedent(f"""
        import os, sys
        from serve.store import Stores
        with Stores.at({store.db.url!r}).db.alone("upkeep") as mine:
            print(mine, flush=True)
            sys.stdin.readline()
            os._exit(0)  # dies holding it
    """)
    proc = subprocess.Popen([sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "True"
        with other.db.alone("upkeep") as theirs:
            assert not theirs
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.wait(timeout=30)
        with other.db.alone("upkeep") as theirs:
            assert theirs
    finally:
        proc.kill()

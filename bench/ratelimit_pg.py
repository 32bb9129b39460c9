"""What a request's rate-limit check costs in the server: the shared-memory table of one server
(serve/ratetable.py) against the buckets in PostgreSQL that every replica spends (serve/store/limits.py).

    TRIAGE_TEST_POSTGRES_URL=postgresql://… python -m bench.ratelimit_pg [--n 5000]

(`make pg-start` or `.ci/pg-cluster start DIR` prints such a URL.) For each way it times ``n`` calls of
:meth:`serve.ratelimit.RateLimiter.acheck_request` on an event loop, as the middleware makes them (the
round trip in a worker thread): CPU of this process per call (``time.process_time``, every thread) and
wall time per call (the round trip included), median of 5 rounds. "admitted" spends a key's and a tenant's bucket (limits far above the calls' rate);
"refused" is a key over its limit, answered from the server's table after the database's first refusal.
The database's own CPU is not in the figures (it runs in another process; its share is in the wall time).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
import uuid

from model.core.errors import RateLimitedError
from serve.ratelimit import RateLimiter
from serve.store import Stores


def _time(check: RateLimiter, tenant: str, n: int) -> tuple[float, float]:
    """As the server's middleware calls it: ``acheck_request`` on an event loop (the round trip to
    PostgreSQL in a worker thread)."""

    async def run() -> None:
        for i in range(n):
            with contextlib.suppress(RateLimitedError):
                await check.acheck_request(tenant, f"k{i % 16}")

    cpu0, wall0 = time.process_time(), time.perf_counter()
    asyncio.run(run())
    return (time.process_time() - cpu0) / n * 1e3, (time.perf_counter() - wall0) / n * 1e3


def main(argv: list[str] | None = None) -> None:
    import os

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5000, help="calls per round")
    ap.add_argument("--url", default=os.environ.get("TRIAGE_TEST_POSTGRES_URL", ""), help="PostgreSQL URL")
    args = ap.parse_args(argv)
    if not args.url:
        raise SystemExit("give --url or TRIAGE_TEST_POSTGRES_URL (a PostgreSQL this may write to)")
    stores = Stores.at(args.url)
    stores.db.upgrade()
    high = dict(key_rps=1e9, key_burst=1e9, tenant_rps=1e9, tenant_burst=1e9, daily_steps=0)
    ways = {
        "shared-memory table (one server)": (RateLimiter(**high), "admit"),
        "PostgreSQL buckets, admitted": (RateLimiter(**high, shared=stores.limits), "admit"),
        "PostgreSQL buckets, refused": (RateLimiter(key_rps=0.001, key_burst=1, tenant_rps=0, tenant_burst=0,
                                                     daily_steps=0, shared=stores.limits), "refuse"),
    }
    print(f"{'way':36} {'CPU ms/call':>12} {'wall ms/call':>13}")
    for name, (lim, _) in ways.items():
        tenant = f"bench-{uuid.uuid4().hex[:8]}"
        _time(lim, tenant, 200)  # warm: the connection, the prepared statement, the buckets
        rounds = [_time(lim, tenant, args.n) for _ in range(5)]
        cpu = statistics.median(r[0] for r in rounds)
        wall = statistics.median(r[1] for r in rounds)
        print(f"{name:36} {cpu:12.4f} {wall:13.4f}")
    stores.limits.sweep(0.0)
    stores.limits.close()
    stores.db.dispose()


if __name__ == "__main__":
    main()

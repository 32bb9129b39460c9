"""The app's own cost of a refusal (``bench/abuse.py``'s phase ``refusal_app``): the ASGI app called in
process, no uvicorn, no sockets, with an over-limit key, µs per 429.

Run alone: ``.venv/bin/python bench/refusal_cost.py [N]``.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def refusal_app(n: int = 5000) -> dict[str, Any]:
    """The app's own cost of a refusal, in process (no uvicorn, no sockets): the ASGI app called with
    an over-limit key's ``GET /v1/traces?limit=1`` ``n`` times; wall and thread CPU per call."""
    from fastapi.testclient import TestClient

    from serve.app import create_app
    from serve.auth import create_key
    from serve.settings import Settings
    from serve.store import Stores

    with tempfile.TemporaryDirectory(prefix="triage-refusal-") as tmp:
        settings = Settings(data_dir=Path(tmp), classifier=False, runscore=False, auth="on", auth_cache_s=3600)
        store = Stores.at(settings.resolved_database_url)
        store.db.upgrade()
        key = create_key(store.keys, "abuser")[0]
        store.db.dispose()
        app = create_app(settings)
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
            "path": "/v1/traces", "raw_path": b"/v1/traces", "query_string": b"limit=1", "root_path": "",
            "headers": [(b"host", b"x"), (b"authorization", f"Bearer {key}".encode())],
            "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 80),
        }

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def measure() -> dict[str, Any]:
            statuses: dict[int, int] = {}
            wall: list[float] = []  # of the 429s only (the admitted ones read the store)
            cpu: list[float] = []
            last = [0]

            async def send(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    last[0] = message["status"]
                    statuses[last[0]] = statuses.get(last[0], 0) + 1

            for _ in range(n):
                w0, c0 = time.perf_counter(), time.thread_time()
                await app(dict(scope), receive, send)
                c1, w1 = time.thread_time(), time.perf_counter()
                if last[0] == 429:
                    cpu.append(c1 - c0)
                    wall.append(w1 - w0)
            return {"calls": n, "statuses": statuses, "wall_p50_us": statistics.median(wall) * 1e6,
                    "wall_mean_us": statistics.fmean(wall) * 1e6, "cpu_mean_us": statistics.fmean(cpu) * 1e6,
                    "share_429": len(wall) / n}

        with TestClient(app) as client:  # the lifespan runs; the first request caches the key
            assert client.get("/v1/traces?limit=1", headers={"Authorization": f"Bearer {key}"}).status_code == 200
            assert client.portal is not None  # inside the with: the lifespan's portal
            out: dict[str, Any] = client.portal.call(measure)
    return out


if __name__ == "__main__":
    print(json.dumps(refusal_app(int(sys.argv[1]) if len(sys.argv) > 1 else 5000), indent=2))

"""serve/direct.py: the hot routes' handler calls their dependencies directly, and answers every request
as FastAPI's own handler does — the same requests through both give equal responses, a request FastAPI
refuses (a bad query, path or header parameter) is handed to FastAPI's handler, a failed auth or a spent
rate limit raises the same error from the same dependency. FastAPI's handler is the one that runs while
``app.dependency_overrides`` holds anything (serve/direct.py), which is how these tests reach it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import fastapi.routing
import httpx
import pytest
from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.testclient import TestClient
from prometheus_client import generate_latest

from serve.auth import create_key
from serve.direct import DirectRoute
from serve.examples import HEALTHY, OPENAI_LOOP
from serve.settings import Settings


def _unused() -> None:  # pragma: no cover - only its presence in dependency_overrides matters
    return None


class Solves:
    """Counts FastAPI's ``solve_dependencies`` calls: 0 when the direct handler answered."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        real = fastapi.routing.solve_dependencies

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.n += 1
            return await real(*args, **kwargs)

        monkeypatch.setattr(fastapi.routing, "solve_dependencies", counted)

    def __call__(self, send: Callable[[], httpx.Response]) -> tuple[httpx.Response, int]:
        n0 = self.n
        r = send()
        return r, self.n - n0


def both(client: TestClient, solves: Solves, send: Callable[[str], httpx.Response]
         ) -> tuple[httpx.Response, int, httpx.Response, int]:
    """``send(mode)`` through the direct handler ("direct"), then through FastAPI's ("fastapi")."""
    app: Any = client.app
    app.dependency_overrides.clear()
    direct, n_direct = solves(lambda: send("direct"))
    app.dependency_overrides[_unused] = _unused
    try:
        slow, n_slow = solves(lambda: send("fastapi"))
    finally:
        app.dependency_overrides.clear()
    assert n_slow > 0  # FastAPI's handler did answer
    return direct, n_direct, slow, n_slow


def same(a: httpx.Response, b: httpx.Response) -> None:
    assert a.status_code == b.status_code, (a.text, b.text)
    assert a.content == b.content
    drop = {"server-timing", "date", "retry-after"}
    assert {k: v for k, v in a.headers.items() if k not in drop} == {k: v for k, v in b.headers.items() if k not in drop}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, dict[str, str]]]:
    from serve.app import create_app

    settings = Settings(data_dir=tmp_path_factory.mktemp("direct"), classifier=False, auth_cache_s=0,
                        rate_limit_key_rps=0, rate_limit_tenant_rps=0, max_steps=50)
    with TestClient(create_app(settings)) as client:
        keys: Any = client.app.state.key_store  # type: ignore[attr-defined]
        made = {"acme": create_key(keys, "acme")[0], "ops": create_key(keys, "ops", operator=True)[0]}
        create_key(keys, "globex")
        yield client, made


def _h(key: str | None, **extra: str) -> dict[str, str]:
    h = {"Content-Type": "application/json", **extra}
    if key is not None:
        h["Authorization"] = f"Bearer {key}"
    return h


STEP = {"messages": [{"role": "user", "content": "x"}]}
REFUSED = [  # (name, path, headers(keys), body, FastAPI's handler answers): the same answer from both handlers
    ("no key", "/v1/diagnose", lambda k: _h(None), HEALTHY, False),
    ("basic auth", "/v1/diagnose", lambda k: {"Authorization": "Basic abc"}, HEALTHY, False),
    ("not a key", "/v1/diagnose", lambda k: _h("nope"), HEALTHY, False),
    ("unknown key", "/v1/diagnose", lambda k: _h("trg_zzzzzzzz_unknown"), HEALTHY, False),
    ("tenant header, not operator", "/v1/diagnose", lambda k: _h(k["acme"], **{"X-Triage-Tenant": "globex"}), HEALTHY, False),
    ("tenant header, no such tenant", "/v1/diagnose", lambda k: _h(k["ops"], **{"X-Triage-Tenant": "nobody"}), HEALTHY, False),
    ("tenant header, bad name", "/v1/diagnose", lambda k: _h(k["ops"], **{"X-Triage-Tenant": "bad name!"}), HEALTHY, True),
    ("bad format query", "/v1/diagnose?format=xml", lambda k: _h(k["acme"]), HEALTHY, True),
    ("empty session query", "/v1/diagnose?session=", lambda k: _h(k["acme"]), HEALTHY, True),
    ("bad query, no key", "/v1/diagnose?format=xml", lambda k: _h(None), HEALTHY, True),  # FastAPI: the 401 first
    ("unreadable body", "/v1/diagnose", lambda k: _h(k["acme"]), "{not json", False),
    ("too many steps", "/v1/diagnose", lambda k: _h(k["acme"]),
     {"trace": {"steps": [{"kind": "user_input", "content": "x"}] * 51}}, False),
    ("session id pattern", "/v1/sessions/a b/steps", lambda k: _h(k["acme"]), STEP, True),
    ("session id too long", "/v1/sessions/" + "s" * 129 + "/steps", lambda k: _h(k["acme"]), STEP, True),
    ("session id pattern, no key", "/v1/sessions/a b/steps", lambda k: _h(None), STEP, True),
    ("step body", "/v1/sessions/s1/steps", lambda k: _h(k["acme"]), {"messages": [{"role": "robot"}]}, False),
    ("step, no key", "/v1/sessions/s1/steps", lambda k: _h(None), STEP, False),
]


@pytest.mark.parametrize(("name", "path", "headers", "body", "by_fastapi"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refusals_equal_fastapis(service: tuple[TestClient, dict[str, str]], monkeypatch: pytest.MonkeyPatch,
                                 name: str, path: str, headers: Callable[[dict[str, str]], dict[str, str]],
                                 body: Any, by_fastapi: bool) -> None:
    client, keys = service
    content = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    direct, n_direct, slow, _ = both(client, Solves(monkeypatch),
                                     lambda _: client.post(path, content=content, headers=headers(keys)))
    same(direct, slow)
    assert direct.status_code in (401, 403, 404, 413, 422), direct.text
    # a request with a parameter FastAPI refuses (a bad tenant header, query or path id) goes to FastAPI's
    # handler; a failed auth, a tenant switch refused or a bad body is the direct handler's, raised by the
    # same function
    assert (n_direct > 0) == by_fastapi, (name, n_direct)


def test_bad_query_gets_fastapis_422(service: tuple[TestClient, dict[str, str]]) -> None:
    client, keys = service
    r = client.post("/v1/diagnose?format=xml", content=json.dumps(HEALTHY), headers=_h(keys["acme"]))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "format"], r.text
    r = client.post("/v1/sessions/a%20b/steps", content=b"{}", headers=_h(keys["acme"]))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["path", "session_id"], r.text


def _stable(body: dict[str, Any]) -> dict[str, Any]:
    """A diagnosis without what differs between two runs of one request (ids, times, stored counts)."""
    volatile = {"id", "trace_id", "run_id", "created_at", "received_at", "diagnosed_at", "elapsed_ms", "timings",
                "session", "stored", "history", "recurrence", "updated_at", "agent"}
    if isinstance(body, dict):
        return {k: _stable(v) for k, v in body.items() if k not in volatile}
    if isinstance(body, list):
        return [_stable(v) for v in body]  # type: ignore[return-value]
    return body


@pytest.mark.parametrize("query", ["", "?format=openai", "?session=run-7"])
def test_diagnoses_equal_fastapis(service: tuple[TestClient, dict[str, str]], monkeypatch: pytest.MonkeyPatch,
                                  query: str) -> None:
    client, keys = service
    body = OPENAI_LOOP["trace"] if query == "?format=openai" else OPENAI_LOOP  # a bare trace, an envelope
    direct, n_direct, slow, _ = both(client, Solves(monkeypatch), lambda _: client.post(
        "/v1/diagnose" + query, content=json.dumps(body), headers=_h(keys["acme"])))
    assert direct.status_code == slow.status_code == 200, (direct.text, slow.text)
    assert n_direct == 0  # valid query parameters too: the direct handler
    assert _stable(direct.json()) == _stable(slow.json())
    assert direct.headers["content-type"] == slow.headers["content-type"] == "application/json"
    assert "queue;dur=" in direct.headers["server-timing"] and "queue;dur=" in slow.headers["server-timing"]


def test_operator_tenant_and_session_steps_equal_fastapis(service: tuple[TestClient, dict[str, str]],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    client, keys = service
    solves = Solves(monkeypatch)
    steps = [{"messages": [{"role": "user", "content": "Book a hotel in Lisbon"}]},
             {"messages": [{"role": "assistant", "content": "Looking."}]}]
    for i, step in enumerate(steps):
        direct, n_direct, slow, _ = both(client, solves, lambda mode, step=step: client.post(
            f"/v1/sessions/{mode}-1/steps", content=json.dumps(step), headers=_h(keys["acme"])))
        assert direct.status_code == slow.status_code == 200, (direct.text, slow.text)
        assert n_direct == 0
        a, b = direct.json(), slow.json()
        assert a.keys() == b.keys() and a["steps"] == b["steps"] == i + 1
    # an operator acting on another tenant: the header validated by FastAPI's function, then the same calls
    direct, n_direct, slow, _ = both(client, solves, lambda mode: client.post(
        f"/v1/sessions/{mode}-ops/steps", content=json.dumps(steps[0]),
        headers=_h(keys["ops"], **{"X-Triage-Tenant": "globex"})))
    assert direct.status_code == slow.status_code == 200 and n_direct == 0
    assert client.get("/v1/sessions/direct-ops", headers=_h(keys["ops"], **{"X-Triage-Tenant": "globex"})).status_code == 200
    assert client.get("/v1/sessions/direct-ops", headers=_h(keys["ops"])).status_code == 404


def test_rate_limit_spent_once_and_refused_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The route's ``rate_limit`` dependency (keys not cached: ``auth_cache_s=0``, so the middleware
    leaves them to it) spends one token a request, and its 429 is the same from both handlers."""
    from serve.app import create_app

    settings = Settings(data_dir=tmp_path, classifier=False, auth_cache_s=0, rate_limit_key_rps=0.01,
                        rate_limit_key_burst=2, rate_limit_tenant_rps=0)
    with TestClient(create_app(settings)) as client:
        keys: Any = client.app.state.key_store  # type: ignore[attr-defined]
        made = {"direct": create_key(keys, "acme")[0], "fastapi": create_key(keys, "acme")[0]}
        solves = Solves(monkeypatch)
        answers: dict[str, list[httpx.Response]] = {"direct": [], "fastapi": []}

        def send(mode: str) -> httpx.Response:
            r = client.post("/v1/diagnose", content=json.dumps(HEALTHY), headers=_h(made[mode]))
            answers[mode].append(r)
            return r

        for _ in range(3):
            both(client, solves, send)
    for mode in ("direct", "fastapi"):
        assert [r.status_code for r in answers[mode]] == [200, 200, 429], mode
    same(answers["direct"][2], answers["fastapi"][2])
    assert int(answers["direct"][2].headers["retry-after"]) >= 1


# -- the plan on a route of its own: the order and the cache of FastAPI's solve_dependencies ---------------------

CALLS: list[str] = []  # what the toy route's dependencies were called with, in order


async def _first(request: Request) -> str:
    CALLS.append("first")
    return "1"


def _second(one: Annotated[str, Depends(_first)]) -> str:  # a plain def: FastAPI runs it in the thread pool
    CALLS.append("second")
    return one + "2"


async def _uncached(one: Annotated[str, Depends(_first, use_cache=False)]) -> str:
    CALLS.append("uncached")
    return one + "u"


async def _third(two: Annotated[str, Depends(_second)], u: Annotated[str, Depends(_uncached)],
                 tag: Annotated[str | None, Header(max_length=3)] = None) -> str:
    CALLS.append(f"third:{tag}")
    return two + u


TOY = APIRouter(route_class=DirectRoute, dependencies=[Depends(_third)])


@TOY.get("/toy/{n}")
async def _toy_route(n: Annotated[int, PathParam(ge=0)], t: Annotated[str, Depends(_third)],
                     u: Annotated[str, Depends(_uncached)], q: Annotated[int, Query(le=9)] = 1) -> Response:
    CALLS.append("toy")
    return Response(json.dumps({"n": n, "t": t, "u": u, "q": q}), media_type="application/json")


@TOY.get("/model")
async def _model_route() -> dict[str, int]:  # FastAPI serialises the answer: not a direct route
    return {"a": 1}


@pytest.mark.parametrize("url", ["/toy/3", "/toy/3?q=4", "/toy/-1", "/toy/x", "/toy/3?q=10", "/model"])
@pytest.mark.parametrize("tag", [None, "ab", "abcd"])
def test_plan_calls_as_solve_dependencies(monkeypatch: pytest.MonkeyPatch, url: str, tag: str | None) -> None:
    app = FastAPI()
    app.include_router(TOY, dependencies=[Depends(_second)])
    headers = {} if tag is None else {"tag": tag}
    with TestClient(app) as client:
        order: dict[str, list[str]] = {}

        def send(mode: str) -> httpx.Response:
            CALLS.clear()
            r = client.get(url, headers=headers)
            order[mode] = list(CALLS)
            return r

        direct, n_direct, slow, _ = both(client, Solves(monkeypatch), send)
    by_path = {getattr(r, "path", None): r for r in TOY.routes}
    assert by_path["/toy/{n}"].direct is True and by_path["/model"].direct is False  # type: ignore[union-attr]
    same(direct, slow)
    assert order["direct"] == order["fastapi"]
    if url != "/model":  # an invalid parameter (and only one) sends the request to FastAPI's handler
        assert (n_direct > 0) == (direct.status_code == 422), (direct.text, n_direct)
    if direct.status_code == 200 and url != "/model":
        assert n_direct == 0
        # FastAPI solves a cached dependency's own tree again: `_first` (uncached under `_uncached`) runs again
        assert order["direct"] == ["first", "second", "first", "uncached", f"third:{tag}", "first", "first", "toy"]


# -- the shortcut: the direct routes routed ahead of FastAPI's included-router walk, with the same answers -------

ROUTING = [  # (method, path, body): what routing decides (a match, 404, 405, the trailing-slash redirect)
    ("POST", "/v1/diagnose", HEALTHY),
    ("GET", "/v1/diagnose", None),
    ("PUT", "/v1/diagnose", None),
    ("HEAD", "/v1/diagnose", None),
    ("POST", "/v1/diagnose/", HEALTHY),
    ("POST", "/v1/diagnose/x", HEALTHY),
    ("POST", "/v1/sessions/r1/steps", STEP),
    ("GET", "/v1/sessions/r1/steps", None),
    ("POST", "/v1/sessions/r1/steps/", STEP),
    ("GET", "/v1/sessions/r1", None),
    ("PUT", "/v1/sessions/r1", None),
    ("HEAD", "/v1/sessions/r1", None),
    ("DELETE", "/v1/sessions/nobody", None),
    ("GET", "/v1/sessions/", None),
    ("GET", "/healthz", None),
]


def test_shortcut_routes_as_fastapi(tmp_path: Path) -> None:
    """The same requests through an app with the shortcut and one without (FastAPI's walk): equal answers,
    and the latency and queue-wait histograms label them by the same route template."""
    from serve.app import create_app
    from serve.direct import _Shortcut

    answers: list[list[tuple[int, bytes, dict[str, str]]]] = []
    metrics: list[str] = []
    for walk in (False, True):
        settings = Settings(data_dir=tmp_path / str(walk), classifier=False, rate_limit_key_rps=0,
                            rate_limit_tenant_rps=0)
        app = create_app(settings)
        shortcuts = [r for r in app.router.routes if isinstance(r, _Shortcut)]
        assert [r.path for r in shortcuts] == ["/v1/diagnose", "/v1/sessions/{session_id}/steps",
                                              "/v1/sessions/{session_id}", "/v1/sessions/{session_id}"]
        # the hot routes' handlers are direct; GET /v1/sessions/{id} returns a model FastAPI serialises
        assert [r.original.direct for r in shortcuts] == [True, True, False, True]
        if walk:
            app.router.routes[:] = [r for r in app.router.routes if not isinstance(r, _Shortcut)]
        with TestClient(app, follow_redirects=False) as client:
            key = create_key(client.app.state.key_store, "acme")[0]  # type: ignore[attr-defined]
            got = []
            for method, path, body in ROUTING:
                r = client.request(method, path, headers=_h(key),
                                   content=None if body is None else json.dumps(body))
                drop = {"server-timing", "date", "content-length"} if r.status_code == 200 else {"date"}
                if "server-timing" in r.headers:  # its durations differ; that it is there does not
                    r.headers["server-timing"] = "queue"
                content = json.dumps(_stable(r.json())).encode() if r.status_code == 200 and r.content else r.content
                got.append((r.status_code, content, {k: v for k, v in r.headers.items() if k not in drop}))
            answers.append(got)
            metrics.append(generate_latest(client.app.state.metrics.registry).decode())  # type: ignore[attr-defined]
    for (method, path, _), a, b in zip(ROUTING, answers[0], answers[1], strict=True):
        assert a == b, (method, path)
    statuses = {(m, p): a[0] for (m, p, _), a in zip(ROUTING, answers[0], strict=True)}
    assert statuses[("GET", "/v1/diagnose")] == 405 and statuses[("POST", "/v1/diagnose/x")] == 404
    assert statuses[("POST", "/v1/diagnose")] == statuses[("POST", "/v1/sessions/r1/steps")] == 200

    def labels(text: str) -> set[str]:
        return {line.rsplit(" ", 1)[0] for line in text.splitlines()
                if line.startswith(("triage_request_duration_seconds_count", "triage_queue_wait_seconds_count"))}

    assert labels(metrics[0]) == labels(metrics[1])
    assert any('route="/v1/sessions/{session_id}/steps"' in x for x in labels(metrics[0]))

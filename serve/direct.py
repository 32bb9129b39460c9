"""``DirectRoute``: FastAPI's route, with its dependencies called directly on the hot routes, and
:func:`shortcut`, which routes them ahead of FastAPI's included-router walk.

FastAPI solves a route's dependencies generically on every request (``solve_dependencies``: each
dependency's signature kinds, cache key and scopes looked at again): 0.26–0.29 ms of the event loop's
CPU a diagnosis, a third of what the loop spends on it. A :class:`DirectRoute` flattens the route's
dependency tree once, when FastAPI builds the route's handler (the router's dependencies included),
into the calls ``solve_dependencies`` makes, in its order and with its cache (a dependency used twice
is called once), and on a request:

1. validates every parameter of the tree (path, query, header, cookie) with FastAPI's own
   ``request_params_to_args``, which has no side effect;
2. when all are valid, calls the dependencies and the endpoint as FastAPI would; an exception they raise
   (a 401, a 429) goes up to the same exception handlers, unchanged;
3. otherwise hands the request, untouched, to FastAPI's own handler: a bad parameter gets FastAPI's 422,
   with FastAPI's order (the dependencies first, then the endpoint's parameters).

FastAPI's handler also serves every request while ``app.dependency_overrides`` holds anything or
FastAPI's telemetry records the request, and the whole route when its tree has anything this does not
call the way FastAPI would (a body parameter, a dependency with ``yield``, security scopes, a
``Response`` or ``BackgroundTasks`` parameter, an endpoint not annotated to return a ``Response``):
:attr:`DirectRoute.direct` then stays False (tests/test_direct.py checks the hot routes' is True).

The OpenAPI document does not change: it is built from the same route attributes. Both pieces read
FastAPI 0.16x internals that may move (``_effective_route_context_var``, ``_IncludedRouter``,
``_get_cache_key``, ``_get_param_aliases``); where one is missing the piece that needs it is skipped
(an older FastAPI copies included routes with their router's dependencies, which need neither), and
tests/test_direct.py checks the hot routes' ``direct`` flags and shortcuts.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

import fastapi.dependencies.models
import fastapi.dependencies.utils
import fastapi.routing
from fastapi import FastAPI, Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.dependencies.utils import get_typed_return_annotation, request_params_to_args
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.routing import Match, Route
from starlette.types import Scope

try:  # FastAPI ≥ 0.16x: a request its telemetry records goes through FastAPI's handler (its spans)
    from fastapi.telemetry import get_telemetry_data
except ImportError:  # pragma: no cover - an older FastAPI has none
    get_telemetry_data = None  # type: ignore[assignment]


@dataclass(frozen=True)
class _Call:
    """One call ``solve_dependencies`` makes: ``call(**kwargs)``, the kwargs being the request's
    parameters validated for it, the request itself, and the results of earlier calls (by index)."""

    call: Callable[..., Any]
    is_async: bool
    params: tuple[_Params, ...]
    request_names: tuple[str, ...]  # parameters that receive the Request (or its HTTPConnection)
    results: tuple[tuple[str, int], ...]  # (parameter, index of the call whose result it receives)


@dataclass(frozen=True)
class _Params:
    """A call's parameters from one part of the request: ``source`` ("path", "query", "header" or
    "cookie"), FastAPI's ``fields``; ``absent``, what FastAPI gives them when the request has none of them
    (their defaults: immutable values only), with ``keys``, the header names that would give one (None:
    the request is always asked)."""

    source: str
    fields: tuple[Any, ...]
    absent: dict[str, Any] | None = None
    keys: frozenset[bytes] | None = None

    def values(self, request: Request) -> dict[str, Any] | None:
        """The parameters as FastAPI validates them (``request_params_to_args``); None when one is invalid."""
        if self.absent is not None:
            if self.source == "query" and not request.scope.get("query_string"):
                return dict(self.absent)
            if self.keys is not None and not any(name in self.keys for name, _ in request.scope["headers"]):
                return dict(self.absent)
        got, errors = request_params_to_args(self.fields, _SOURCES[self.source](request))
        return None if errors else got

    @classmethod
    def of(cls, source: str, fields: list[Any]) -> _Params:
        fields_ = tuple(fields)
        absent, errors = request_params_to_args(fields_, {})  # what a request without them gets
        if errors or not all(v is None or isinstance(v, (str, int, float, bool)) for v in absent.values()):
            return cls(source, fields_)
        if source == "query":
            return cls(source, fields_, absent)
        aliases = getattr(fastapi.dependencies.utils, "_get_param_aliases", None)  # the names FastAPI looks up
        if source == "header" and aliases is not None:
            keys = frozenset(key.lower().encode("latin-1") for f in fields_ for _, key in aliases(f))
            return cls(source, fields_, absent, keys)
        return cls(source, fields_)


_SOURCES: dict[str, Callable[[Request], Mapping[str, Any]]] = {
    "path": lambda r: r.path_params, "query": lambda r: r.query_params,
    "header": lambda r: r.headers, "cookie": lambda r: r.cookies,
}


class _Unsupported(Exception):
    """The tree has something :func:`plan` does not call the way ``solve_dependencies`` would."""


def _cache_key(node: Dependant) -> Any:
    key = getattr(fastapi.dependencies.models, "_get_cache_key", None)  # (call, scopes, scope) in FastAPI 0.16x
    return key(dependant=node) if key is not None else (node.call, tuple(sorted(node.own_oauth_scopes or [])))


def _function(call: Any) -> Any:
    """What runs when ``call`` is called: itself, or an instance's ``__call__`` (``HTTPBearer``'s)."""
    return call if inspect.isroutine(call) or inspect.isclass(call) else call.__call__


def plan(dependant: Dependant) -> tuple[_Call, ...]:
    """The calls FastAPI's handler makes for the route's dependency tree (``dependant``, as the handler
    solves it), in ``solve_dependencies``' order; the last one is the endpoint. (A cached dependency's
    parameters, which FastAPI validates again, are its first call's: the same fields of the same
    request.) Raises :class:`_Unsupported` when the tree holds something FastAPI fills in or calls in
    another way."""
    calls: list[_Call] = []
    cached: dict[Any, int] = {}

    def solve(node: Dependant) -> _Call:
        """``node``'s sub-dependencies solved (their calls appended), as ``solve_dependencies(node)``
        does before ``node`` itself is called or found in the cache."""
        results: list[tuple[str, int]] = []
        for sub in node.dependencies:
            call = solve(sub)  # FastAPI solves a sub-dependency's own tree before its cache lookup
            key = _cache_key(sub)
            if sub.use_cache and key in cached:
                index = cached[key]
            else:
                calls.append(call)
                index = len(calls) - 1
            cached.setdefault(key, index)
            if sub.name is not None:
                results.append((sub.name, index))
        if (node.body_params or node.security_scopes_param_name or node.response_param_name
                or node.background_tasks_param_name or node.websocket_param_name or node.own_oauth_scopes
                or node.parent_oauth_scopes or getattr(node, "concurrency", None) is not None):
            raise _Unsupported(f"{node.call!r}: a parameter FastAPI fills in itself")
        if node.call is None or inspect.isgeneratorfunction(_function(node.call)) \
                or inspect.isasyncgenfunction(_function(node.call)):
            raise _Unsupported(f"{node.call!r}: no call, or a dependency with yield")
        params = tuple(_Params.of(source, fields) for source, fields in (
            ("path", node.path_params), ("query", node.query_params), ("header", node.header_params),
            ("cookie", node.cookie_params)) if fields)
        names = tuple(n for n in (node.request_param_name, node.http_connection_param_name) if n)
        return _Call(node.call, inspect.iscoroutinefunction(_function(node.call)), params, names, tuple(results))

    calls.append(solve(dependant))
    returns = get_typed_return_annotation(dependant.call) if dependant.call is not None else None
    if not (isinstance(returns, type) and issubclass(returns, Response)):
        raise _Unsupported(f"{dependant.call!r} does not return a Response (FastAPI would serialise it)")
    return tuple(calls)


class DirectRoute(APIRoute):
    """An ``APIRoute`` (``APIRouter(route_class=DirectRoute)``) whose handler calls the route's
    dependencies directly in the common case (see the module's docstring); :attr:`direct` says
    whether it does (False: FastAPI's handler serves every request)."""

    direct: bool = False

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        fastapi_handler = super().get_route_handler()
        # The tree FastAPI's handler solves: an included route's (its router's dependencies too) is its
        # inclusion's, which FastAPI builds the handler under (a ContextVar of fastapi.routing).
        context_var = getattr(fastapi.routing, "_effective_route_context_var", None)
        context = context_var.get() if context_var is not None else None
        route: Any = context if context is not None and context.original_route is self else self
        try:
            calls = plan(route.dependant)
        except _Unsupported:
            calls = ()
        self.direct = bool(calls) and route.body_field is None
        if not self.direct:
            return fastapi_handler
        overrides = route.dependency_overrides_provider

        async def handler(request: Request) -> Response:
            if (overrides is not None and getattr(overrides, "dependency_overrides", None)) \
                    or (get_telemetry_data is not None and get_telemetry_data() is not None):
                return await fastapi_handler(request)
            given: list[dict[str, Any]] = []
            for c in calls:  # every parameter first: nothing is called for a request FastAPI refuses
                values: dict[str, Any] = {}
                for params in c.params:
                    got = params.values(request)
                    if got is None:
                        return await fastapi_handler(request)
                    values.update(got)
                given.append(values)
            results: list[Any] = []
            for c, values in zip(calls, given, strict=True):
                for name in c.request_names:
                    values[name] = request
                for name, index in c.results:
                    values[name] = results[index]
                results.append(await c.call(**values) if c.is_async else await run_in_threadpool(c.call, **values))
            response = results[-1]
            assert isinstance(response, Response)
            return response

        return handler


class _Shortcut(Route):
    """A direct route as a plain Starlette route in the app's own route list: the same path, methods,
    endpoint, name and ASGI app (FastAPI's ``request_response`` around the route's handler, its body
    limit) and the same ``scope["route"]`` (the ``DirectRoute``: the latency and queue-wait histograms
    label by its path). Not in the OpenAPI document (the ``DirectRoute`` is)."""

    def __init__(self, route: Any) -> None:
        super().__init__(route.path, route.endpoint, methods=sorted(route.methods), name=route.name,
                         include_in_schema=False)
        self.methods = set(route.methods)  # as FastAPI's (Starlette's Route adds HEAD to GET)
        self.app = route.app
        self.original: Any = getattr(route, "original_route", route)

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child_scope = super().matches(scope)
        if match != Match.NONE:
            child_scope["route"] = self.original
        return match, child_scope


def shortcut(app: FastAPI) -> int:
    """Route the app's ``DirectRoute`` routes without FastAPI's included-router walk: each included
    router's leading ``DirectRoute`` routes go, as plain Starlette routes (:class:`_Shortcut`), into
    ``app.router.routes`` just before that router, so every route before it still matches first and
    they keep their order. (FastAPI ≥ 0.16x keeps an included router as one entry and matches a request
    against its routes twice, once to choose it and once to handle it: 0.05–0.09 ms of the event loop's
    CPU a request.) Call it once the routers are included; returns how many routes it put in."""
    included = getattr(fastapi.routing, "_IncludedRouter", None)
    if included is None:  # an older FastAPI copies included routes into the app's list itself
        return 0
    routes: list[Any] = []
    added = 0
    for entry in app.router.routes:
        if isinstance(entry, included):
            for candidate in entry.effective_candidates():
                original = getattr(candidate, "original_route", None)
                if not isinstance(original, DirectRoute) or candidate.app is None:
                    break
                routes.append(_Shortcut(candidate))
                added += 1
        routes.append(entry)
    app.router.routes[:] = routes
    return added


__all__ = ["DirectRoute", "shortcut"]

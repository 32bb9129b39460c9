"""The client's response models (``client/agent_triage_client/models.py``, written by hand) against
the service's OpenAPI schema: every model the client parses an answer into, and every model nested
in it, beside the server's component it stands for.

Pairs come from the client itself: each call of :class:`TriageClient` is made against a transport
that records the route and answers 400; the route's 200 response in the OpenAPI document is the
server's component, the call's return annotation the client's model; nested models pair up field
by field. Per pair:

- **field names**: the client has every field the server sends; a field the client adds is one
  some pairing of the same client model sends (a session step's failure has ``reach_*``, a
  ``/v1/diagnose`` failure not), or the client's own (``served``, ``client_error``);
- **required-ness**: a field the client requires, the server requires (the client may default
  what the server always sends: it parses older services' answers too);
- **types**: the same JSON types, nullable where the server's are (the client may allow null
  where the server never sends it: older services); a server enum is an open enum on the client
  (``Literal[…] | str``, so that a newer service's value still parses) with the same values.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from agent_triage_client import TriageAPIError, TriageClient, models
from pydantic import BaseModel

from serve.app import create_app
from serve.settings import Settings

#: Fields only the client has: a fail-open fallback says so in them.
CLIENT_ONLY = frozenset({"served", "client_error"})
#: Client models that are only bases of others (checked through every model that extends them).
BASES = frozenset({"Versioned"})

#: One call per client method that parses an answer into a model (the arguments do not matter:
#: the transport answers 400 before anything is parsed).
CALLS: dict[str, Callable[[TriageClient], object]] = {
    "diagnose": lambda c: c.diagnose({"messages": [{"role": "user", "content": "hi"}]}),
    "append_steps": lambda c: c.append_steps("s1", messages=[{"role": "user", "content": "hi"}]),
    "report_outcome": lambda c: c.report_outcome("r1", True),
    "observe": lambda c: c.observe("latency", [1.0]),
    "get_session": lambda c: c.get_session("s1"),
    "list_traces": lambda c: c.list_traces(),
    "get_trace": lambda c: c.get_trace("t1"),
    "get_graph": lambda c: c.get_graph("t1"),
    "add_label": lambda c: c.add_label("t1", "loop"),
    "changepoints": lambda c: c.changepoints("latency"),
    "list_agents": lambda c: c.list_agents(),
}

Node = tuple[Any, ...]


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    return create_app(Settings()).openapi()


def _client_models() -> dict[str, type[BaseModel]]:
    return {name: cls for name, cls in vars(models).items()
            if inspect.isclass(cls) and issubclass(cls, BaseModel) and cls.__module__ == models.__name__
            and not name.startswith("_")}


def _routes(openapi: dict[str, Any]) -> dict[str, tuple[type[BaseModel], str]]:
    """Client method → (its model, the server's component for the route it calls)."""
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(400, json={"detail": "recorded"})

    templates = [(re.compile("^" + re.sub(r"\{[^/]+\}", "[^/]+", path) + "$"), path) for path in openapi["paths"]]
    out: dict[str, tuple[type[BaseModel], str]] = {}
    with TriageClient("http://triage.test", transport=httpx.MockTransport(answer), retries=0) as client:
        for name, call in CALLS.items():
            seen.clear()
            with pytest.raises(TriageAPIError):
                call(client)
            (request,) = seen
            path = next(p for rx, p in templates if rx.match(request.url.path))
            response = openapi["paths"][path][request.method.lower()]["responses"]["200"]
            ref = response["content"]["application/json"]["schema"]["$ref"]
            model = typing.get_type_hints(getattr(TriageClient, name))["return"]
            out[name] = (model, ref.rsplit("/", 1)[-1])
    return out


def _node(schema: dict[str, Any], defs: dict[str, Any]) -> Node:
    """A JSON schema reduced to what the comparison reads: ``("model", name)``, ``("enum", values)``,
    ``("open-enum", values)``, ``("nullable", node)``, ``("list", node)``, ``("dict", node)`` or a
    JSON type (``date-time`` strings apart)."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        target = defs[name]
        return ("enum", frozenset(target["enum"])) if "enum" in target else ("model", name)
    if "anyOf" in schema:
        options = [o for o in schema["anyOf"] if o.get("type") != "null"]
        nodes = [_node(o, defs) for o in options]
        if len(nodes) == 2 and nodes[0][0] == "enum" and nodes[1] == ("string",):
            inner: Node = ("open-enum", nodes[0][1])
        elif len(nodes) == 1:
            inner = nodes[0]
        else:
            inner = ("union", frozenset(nodes))
        return ("nullable", inner) if len(options) < len(schema["anyOf"]) else inner
    if "enum" in schema:
        return ("enum", frozenset(schema["enum"]))
    if "const" in schema:
        return ("enum", frozenset([schema["const"]]))
    kind = schema.get("type")
    if kind == "array":
        return ("list", _node(schema.get("items", {}), defs))
    if kind == "object":
        extra = schema.get("additionalProperties")
        return ("dict", _node(extra, defs) if isinstance(extra, dict) else ("any",))
    if kind == "string" and schema.get("format") == "date-time":
        return ("date-time",)
    return (kind,) if kind else ("any",)


class _Comparison:
    """Walks client models beside server components, pairing nested models as it goes."""

    def __init__(self, openapi: dict[str, Any]) -> None:
        self.server_defs: dict[str, Any] = openapi["components"]["schemas"]
        self.pairs: set[tuple[str, str]] = set()
        self.top: set[tuple[str, str]] = set()  # (a call's model, its route's component)
        self.problems: list[str] = []
        self._client_defs: dict[str, Any] = {}

    def add(self, model: type[BaseModel], component: str) -> None:
        schema = model.model_json_schema(ref_template="#/$defs/{model}")
        self._client_defs.update(schema.pop("$defs", {}))
        self._client_defs[model.__name__] = schema
        self.top.add((model.__name__, component))
        self._pair(model.__name__, component)

    def _pair(self, client: str, server: str) -> None:
        if (client, server) in self.pairs:
            return
        self.pairs.add((client, server))
        c, s = self._client_defs[client], self.server_defs[server]
        c_props, s_props = c.get("properties", {}), s.get("properties", {})
        where = f"client {client} / server {server}"
        for name in sorted(set(s_props) - set(c_props)):
            self.problems.append(f"{where}: the client has no field {name!r}")
        for name in sorted(set(c.get("required", [])) - set(s.get("required", []))):
            self.problems.append(f"{where}: the client requires {name!r}, the server may leave it out")
        for name in sorted(set(c_props) & set(s_props)):
            self._compare(_node(c_props[name], self._client_defs), _node(s_props[name], self.server_defs),
                          f"{where}.{name}")

    def _compare(self, c: Node, s: Node, where: str) -> None:
        if c[0] == "nullable":
            self._compare(c[1], s[1] if s[0] == "nullable" else s, where)
        elif s[0] == "nullable":
            self.problems.append(f"{where}: the server may send null, the client's type is {c}")
        elif c[0] == "model" and s[0] == "model":
            self._pair(c[1], s[1])
        elif c[0] in ("list", "dict") and s[0] == c[0]:
            self._compare(c[1], s[1], where)
        elif s[0] == "enum":
            if c[0] != "open-enum":
                self.problems.append(f"{where}: the server's enum {sorted(s[1])} is {c} on the client "
                                     "(make it Literal[...] | str)")
            elif c[1] != s[1]:
                self.problems.append(f"{where}: enum values differ: the client lacks {sorted(s[1] - c[1])}, "
                                     f"the server has no {sorted(c[1] - s[1])}")
        elif c != s and not (c == ("number",) and s == ("integer",)):  # a float takes an int
            self.problems.append(f"{where}: the client's type is {c}, the server's {s}")

    def extra_fields(self) -> list[str]:
        """Client fields that no pairing of their model sends (beyond the client's own)."""
        sent: dict[str, set[str]] = {}
        for client, server in self.pairs:
            sent.setdefault(client, set()).update(self.server_defs[server].get("properties", {}))
        return [f"client {client}: no server component sends {sorted(extra)}"
                for client, names in sorted(sent.items())
                if (extra := set(self._client_defs[client].get("properties", {})) - names - CLIENT_ONLY)]


@pytest.fixture(scope="module")
def comparison(openapi: dict[str, Any]) -> _Comparison:
    comparison = _Comparison(openapi)
    for model, component in _routes(openapi).values():
        comparison.add(model, component)
    return comparison


def test_every_call_that_parses_a_model_is_listed() -> None:
    parsing = {name for name, fn in inspect.getmembers(TriageClient, inspect.isfunction)
               if not name.startswith("_") and isinstance(typing.get_type_hints(fn).get("return"), type)
               and issubclass(typing.get_type_hints(fn)["return"], BaseModel)}
    assert parsing == set(CALLS)


def test_each_route_answers_with_the_component_its_client_model_stands_for(openapi: dict[str, Any]) -> None:
    routes = {name: (model.__name__, component) for name, (model, component) in _routes(openapi).items()}
    assert routes == {
        "diagnose": ("Diagnosis", "DiagnosisResponse"),
        "append_steps": ("SessionStep", "SessionStepResponse"),
        "report_outcome": ("Outcome", "OutcomeResponse"),
        "observe": ("Observations", "ObservationsResponse"),
        "get_session": ("SessionView", "SessionView"),
        "list_traces": ("TracePage", "TracePageOut"),
        "get_trace": ("TraceDetail", "TraceDetail"),
        "get_graph": ("Graph", "GraphOut"),
        "add_label": ("Label", "LabelResponse"),
        "changepoints": ("Changepoints", "ChangepointsResponse"),
        "list_agents": ("Agents", "AgentsOut"),
    }


def test_every_client_model_is_checked_against_a_server_component(comparison: _Comparison) -> None:
    checked = {client for client, _ in comparison.pairs}
    assert set(_client_models()) - BASES == checked


def test_nested_models_pair_with_the_components_of_the_same_meaning(comparison: _Comparison) -> None:
    assert comparison.pairs - comparison.top == {
        ("AgentInfo", "AgentOut"),
        ("AgentProfileInfo", "AgentProfileOut"),
        ("Alarm", "AlarmOut"),
        ("Attribution", "Attribution"),
        ("Coverage", "Coverage"),
        ("Failure", "Failure"),
        ("Failure", "SessionFailure"),
        ("FailureState", "FailureState"),
        ("GivenRecommendation", "RecommendationOut"),
        ("LocatedFailure", "LocatedFailureOut"),
        ("ProbabilityBasis", "ProbabilityBasis"),
        ("Recommendation", "Recommendation"),
        ("ReportedOutcome", "OutcomeOut"),
        ("RunLabel", "RunLabelOut"),
        ("Segment", "SegmentOut"),
        ("TraceSummary", "TraceSummary"),
    }


def test_client_models_match_the_server_fields_required_ness_and_types(comparison: _Comparison) -> None:
    assert comparison.problems == []
    assert comparison.extra_fields() == []

"""Agent identity without names (model/core/identity.py): exact assignments on generated runs,
JSON round trips, content capture off, prompt changes, and a few real runs of three sets."""

from __future__ import annotations

import doctest
import json
import random
import re

import pytest

import model.core.identity as identity
import model.data.genai_spans as genai_spans
from model.core.consolidation import absorbs, consolidation_due, infer_agents, same_agent
from model.core.identity import (
    PROFILE_CAP,
    AgentProfile,
    RunSignature,
    assign,
    new_agent_key,
    new_profile,
    signature,
)
from model.core.schema import Step, StepKind, Trace
from model.data.genai_spans import otlp_content_off, otlp_content_on
from model.data.realdata import load_source
from model.data.stranger import stranger
from model.importers import load_traces
from model.training.identity_eval import Run, config_of, interleaved, score

_WORDS = ["order", "invoice", "parcel", "refund", "flight", "seat", "hotel", "room", "laptop", "phone", "bill",
          "plan", "city", "river", "song", "paint", "garden", "coffee", "ticket", "report", "chart"]


def _task(rng: random.Random, n: int = 12) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n)) + f" #{rng.randrange(10_000)}"


BILLING = ("You are the billing agent of Acme Corp. Answer questions about invoices and refunds. Never "
           "promise a refund before you have checked the order with the lookup tool. Be brief, be exact, and "
           "hand the customer to a person when they ask for one. Amounts are in euros, dates in ISO format.")
TRAVEL = ("You book trips for Wanderly customers. Search flights and hotels, compare prices, and confirm every "
          "booking with the customer before you pay. Keep a friendly tone and summarise the itinerary at the "
          "end. Respect the travel policy: economy class below six hours, business class above.")


def billing_run(rng: random.Random, *, system: str = BILLING) -> Trace:
    steps = [Step(kind=StepKind.SYSTEM, content=system), Step(kind=StepKind.USER_INPUT, content=_task(rng))]
    for k, tool in enumerate(["lookup_order", rng.choice(["refund", "send_invoice", "lookup_order"])]):
        steps += [Step(kind=StepKind.TOOL_CALL, tool_name=tool, tool_args={"order_id": 7}, content='{"order_id": 7}',
                       call_id=f"c{k}", model="gpt-4o"),
                  Step(kind=StepKind.TOOL_RESULT, tool_name=tool, call_id=f"c{k}", content="ok")]
    return Trace(steps=[*steps, Step(kind=StepKind.FINAL_OUTPUT, content=_task(rng, 8), model="gpt-4o")])


def travel_run(rng: random.Random) -> Trace:
    tools = ["search_flights", rng.choice(["search_hotels", "book", "pay"])]
    steps = [Step(kind=StepKind.SYSTEM, content=TRAVEL),
             Step(kind=StepKind.LLM_OUTPUT, content="Hello! Where would you like to go?"),
             Step(kind=StepKind.USER_INPUT, content=_task(rng))]
    for k, tool in enumerate(tools):
        steps += [Step(kind=StepKind.TOOL_CALL, tool_name=tool, tool_args={"query": "x", "date": "d"},
                       content='{"query": "x", "date": "d"}', call_id=f"t{k}", model="gpt-4.1"),
                  Step(kind=StepKind.TOOL_RESULT, tool_name=tool, call_id=f"t{k}", content="[]"),
                  Step(kind=StepKind.USER_INPUT, content=_task(rng, 5))]
    return Trace(steps=[*steps, Step(kind=StepKind.LLM_OUTPUT, content=_task(rng, 6), model="gpt-4.1")])


def react_run(rng: random.Random) -> Trace:
    """No instructions at all: the question, then Thought / Search[...] / Finish[...]."""
    q = _task(rng, 10)
    return Trace(steps=[
        Step(kind=StepKind.USER_INPUT, content=q + "?"),
        Step(kind=StepKind.LLM_REASONING, content="I need to search " + q[:20]),
        Step(kind=StepKind.TOOL_CALL, tool_name="search", tool_args={"query": q[:20]}, content=f"Search[{q[:20]}]"),
        Step(kind=StepKind.TOOL_RESULT, tool_name="search", content=_task(rng, 30)),
        Step(kind=StepKind.FINAL_OUTPUT, content=f"Finish[{q[:8]}]"),
    ])


def coder_run(rng: random.Random) -> Trace:
    """A template that embeds the task between fixed instructions (SWE-bench style)."""
    issue = " ".join(_task(rng, 40) for _ in range(3))
    prompt = ("<pr_description>\nConsider the following PR description:\n" + issue + "\n</pr_description>\n\n"
              "<instructions>\nMake changes to non-test files in the current directory to fix the issue. Run "
              "one command at a time; when done, submit with echo COMPLETE_TASK_AND_SUBMIT.\n</instructions>")
    return Trace(steps=[
        Step(kind=StepKind.SYSTEM, content="You are a helpful assistant that can run shell commands."),
        Step(kind=StepKind.USER_INPUT, content=prompt),
        Step(kind=StepKind.LLM_OUTPUT, content="THOUGHT: look around"),
        Step(kind=StepKind.TOOL_CALL, tool_name="bash", tool_args={"command": "ls"}, content="ls"),
        Step(kind=StepKind.TOOL_RESULT, tool_name="bash", content="a.py b.py"),
    ])


def shop_run(rng: random.Random) -> Trace:
    """Another ReAct agent with no instructions that also searches: a fixed opening around the
    task, ``search[...]`` first, then ``click[...]`` (it shows all a ``react_run`` shows and more)."""
    q = _task(rng, 10)
    item = f"B0{rng.randrange(10**6)}"
    opening = "WebShop. Find the item the instruction asks for, choose its options and buy it.\nInstruction: "
    return Trace(steps=[
        Step(kind=StepKind.USER_INPUT, content=opening + q + "\n[Search]"),
        Step(kind=StepKind.TOOL_CALL, tool_name="search", tool_args={"query": q[:20]}, content=f"search[{q[:20]}]"),
        Step(kind=StepKind.TOOL_RESULT, tool_name="search", content=_task(rng, 30)),
        Step(kind=StepKind.LLM_REASONING, content=f"{item} looks right"),
        Step(kind=StepKind.TOOL_CALL, tool_name="click", tool_args={"target": item}, content=f"click[{item}]"),
        Step(kind=StepKind.TOOL_RESULT, tool_name="click", content=_task(rng, 20)),
    ])


TEAM = ("You are a member of a team of experts. Solve the task below together with the other members, check "
        "each other's work, and answer with the final result only when everyone agrees on it.")


def team_run(rng: random.Random, *, tool: bool = True) -> Trace:
    """A long task under a short fixed preamble in the first message; most runs use a terminal."""
    task = " ".join(_task(rng, 30) for _ in range(4))
    steps = [Step(kind=StepKind.USER_INPUT, content=TEAM + "\n\n" + task),
             Step(kind=StepKind.LLM_OUTPUT, content=_task(rng, 20))]
    if tool:
        steps += [Step(kind=StepKind.TOOL_CALL, tool_name="terminal", tool_args={"code": "x"}, content="python x.py"),
                  Step(kind=StepKind.TOOL_RESULT, tool_name="terminal", content=_task(rng, 10))]
    return Trace(steps=[*steps, Step(kind=StepKind.LLM_OUTPUT, content=_task(rng, 10))])


MAKERS = {"billing": billing_run, "travel": travel_run, "react": react_run, "coder": coder_run}


def _stream(n_each: int, seed: int = 0) -> tuple[list[str], list[Trace]]:
    rng = random.Random(seed)
    truth = [name for name in MAKERS for _ in range(n_each)]
    rng.shuffle(truth)
    return truth, [MAKERS[name](rng) for name in truth]


def _partition(labels: list[str]) -> list[int]:
    """Each run's label as the index of the first run with that label (compares partitions)."""
    first: dict[str, int] = {}
    return [first.setdefault(x, i) for i, x in enumerate(labels)]


def test_doctests() -> None:
    for module in (identity, genai_spans):
        assert doctest.testmod(module).failed == 0


def test_generated_agents_are_told_apart_exactly_in_any_order() -> None:
    truth, traces = _stream(15)
    keys = infer_agents([signature(t) for t in traces])
    assert _partition(keys) == _partition(truth)
    # the key of each agent is its first run's (deterministic, short)
    assert keys[0] == new_agent_key(signature(traces[0]))
    assert all(re.fullmatch(r"agent-[0-9a-f]{8}", k) for k in keys)
    # blocks of one agent after another: the same partition
    order = sorted(range(len(truth)), key=lambda i: (truth[i], i))
    keys = infer_agents([signature(traces[i]) for i in order])
    assert _partition(keys) == _partition([truth[i] for i in order])


def test_a_second_run_of_a_task_embedding_template_joins_the_first() -> None:
    rng = random.Random(3)
    first, second = coder_run(rng), coder_run(rng)
    profiles = {"coder": AgentProfile.from_signatures([signature(first)])}
    key, sim = assign(signature(second), profiles)
    assert key == "coder" and sim >= identity.THRESHOLD
    assert assign(signature(react_run(rng)), profiles)[0] is None


def test_same_tools_and_model_with_other_instructions_is_another_agent() -> None:
    rng = random.Random(5)
    other = ("You are the collections agent of Acme Corp. Chase overdue invoices politely but firmly, offer a "
             "payment plan after the second reminder and log every promise to pay with its date and amount.")
    truth = ["billing" if rng.random() < 0.5 else "collections" for _ in range(30)]
    traces = [billing_run(rng) if t == "billing" else billing_run(rng, system=other) for t in truth]
    assert _partition(infer_agents([signature(t) for t in traces])) == _partition(truth)


def test_an_edited_prompt_is_followed_and_recorded_a_rewritten_one_is_a_new_agent() -> None:
    rng = random.Random(7)
    edited = BILLING.replace("Be brief, be exact, and hand the customer to a person when they ask for one. ",
                             "Be brief. ")
    sigs = [signature(billing_run(rng)) for _ in range(10)] + [signature(billing_run(rng, system=edited))
                                                               for _ in range(5)]
    profiles: dict[str, AgentProfile] = {}
    keys = infer_agents(sigs, profiles)
    assert len(set(keys)) == 1
    changes = profiles[keys[0]].describe()["instruction_changes"]
    # recorded from the first edited run; by the fifth the profile has learned the new wording
    assert [(c["first_run"], c["last_run"], c["runs"]) for c in changes] == [(11, 14, 4)]
    # a rewrite: a new agent whose profile says why
    sigs += [signature(billing_run(rng, system=TRAVEL)) for _ in range(3)]
    keys = infer_agents(sigs, profiles := {})
    assert len(set(keys[:15])) == 1 and len(set(keys[15:])) == 1 and keys[15] != keys[0]
    origin = profiles[keys[15]].describe()["origin"]
    assert origin["nearest"] == keys[0] and origin["channels"]["system"] == 0.0
    assert "system 0.00" in origin["reason"]


@pytest.mark.parametrize("seed", range(3))
def test_a_match_is_mutual_a_run_showing_much_the_agent_never_does_is_not_its(seed: int) -> None:
    """The forward similarity forgives what a young profile has not seen: a shop run reads above the
    threshold against a one-run search agent, the other way round it does not; the match is refused
    (what the run shows is mostly unknown to the profile) and the two stay two agents in any order."""
    rng = random.Random(seed)
    x = [signature(react_run(rng)) for _ in range(6)]
    y = [signature(shop_run(rng)) for _ in range(6)]
    px = AgentProfile.from_signatures(x[:1])
    assert px.similarity(y[0]) >= identity.THRESHOLD > px.known_share(y[0])
    assert assign(y[0], {"x": px})[0] is None
    assert AgentProfile.from_signatures(y[:1]).similarity(x[0]) < identity.THRESHOLD
    for order in (x[:1] + y + x[1:], y[:1] + x + y[1:], x + y):
        truth = ["x" if s in x else "y" for s in order]
        assert _partition(infer_agents(order)) == _partition(truth)


def test_a_provisional_agent_is_merged_into_the_agent_that_later_takes_its_runs() -> None:
    """An agent's odd first run (no tool) starts an agent the next runs do not join; once the real
    agent has learned its template it takes that run, and the provisional agent is merged into it
    (its key an alias; every run answers the agent it joined)."""
    rng = random.Random(0)
    sigs = [signature(team_run(rng, tool=False))] + [signature(team_run(rng)) for _ in range(12)]
    assert assign(sigs[1], {"first": AgentProfile.from_signatures(sigs[:1])})[0] is None  # a stray at first
    profiles: dict[str, AgentProfile] = {}
    aliases: dict[str, str] = {}
    keys = infer_agents(sigs, profiles, aliases=aliases)
    assert len(set(keys)) == 1 and len(profiles) == 2
    (stray, into), = aliases.items()
    assert into == keys[0] and stray != into and profiles[stray].n_runs == 1
    assert absorbs(profiles[into], sigs[:1]) and not absorbs(profiles[into], [signature(react_run(rng))])
    assert not absorbs(profiles[into], [])
    # only at the checkpoints (5, 10, 20, … runs): at its 5th run the agent does not take the stray's
    # run yet, at its 10th it does
    assert len(set(infer_agents(sigs[:10]))) == 2 and len(set(infer_agents(sigs[:11]))) == 1
    # an agent that never becomes like it is left alone: a real second agent stays one
    other = [signature(billing_run(rng)) for _ in range(3)]
    keys = infer_agents(sigs[:3] + other + sigs[3:])
    assert len(set(keys)) == 2 and len(set(keys[3:6])) == 1
    assert [n for n in range(1, 90) if consolidation_due(n)] == [5, 10, 20, 40, 80]


def test_two_established_agents_are_one_when_each_takes_the_others_typical_run() -> None:
    rng = random.Random(4)
    billing = [signature(billing_run(rng)) for _ in range(12)]
    a, b = AgentProfile.from_signatures(billing[::2]), AgentProfile.from_signatures(billing[1::2])
    assert same_agent(a, b) and same_agent(b, a)
    travel = AgentProfile.from_signatures([signature(travel_run(rng)) for _ in range(6)])
    search = AgentProfile.from_signatures([signature(react_run(rng)) for _ in range(6)])
    shop = AgentProfile.from_signatures([signature(shop_run(rng)) for _ in range(6)])
    assert not same_agent(a, travel) and not same_agent(search, shop) and not same_agent(shop, search)
    # one way is not enough: the shop agent's typical run reads above the threshold against the search agent
    assert search.similarity(shop.core()) >= identity.THRESHOLD
    # the core is the template, not the task text: the features at least half of the runs showed
    assert set(a.core().channels["system"]) == set(a.counts["system"]) and "opening" not in a.core().channels
    coder = AgentProfile.from_signatures([signature(coder_run(rng)) for _ in range(6)])
    assert 0 < len(coder.core().channels["opening"]) < len(coder.counts["opening"]) / 4


def test_round_trips_are_exact_and_profiles_stay_bounded() -> None:
    truth, traces = _stream(8, seed=1)
    sigs = [signature(t) for t in traces]
    for s in sigs:
        assert RunSignature.from_json(json.loads(json.dumps(s.to_json()))) == s
    rng = random.Random(2)
    many = [signature(coder_run(rng)) for _ in range(40)]  # every run brings ~100 new task trigrams
    p = AgentProfile.from_signatures(many)
    assert p.n_runs == 40 and all(len(p.counts[c]) <= PROFILE_CAP[c] * 5 // 4 for c in p.counts)
    q = AgentProfile.from_json(json.loads(json.dumps(p.to_json())))
    assert q.to_json() == p.to_json() and q.describe() == p.describe()
    assert [q.similarity(s) for s in sigs] == [p.similarity(s) for s in sigs]
    d = p.describe()
    assert d["tools"] == ["bash"] and d["n_runs"] == 40 and d["models"] == [] and d["service_names"] == []
    assert d["template_excerpt"] == "You are a helpful assistant that can run shell commands."


def test_assign_with_no_profiles_and_the_threshold() -> None:
    sig = signature(billing_run(random.Random(0)))
    assert assign(sig, {}) == (None, 0.0)
    p = {"b": AgentProfile.from_signatures([sig])}
    key, sim = assign(sig, p)
    assert key == "b" and sim == pytest.approx(1.0)
    key, sim = assign(sig, p, threshold=1.01)
    assert key is None and sim == pytest.approx(1.0)
    assert new_profile(sig, {}).origin is None
    empty = signature(Trace(steps=[Step(kind=StepKind.USER_INPUT, content="   ")]))
    assert empty.empty and not sig.empty and assign(empty, p) == (None, 0.0)


def test_content_capture_off_keeps_tools_model_and_service_only() -> None:
    rng = random.Random(4)
    doc = otlp_content_off(travel_run(rng), model="gpt-4.1", provider="openai", service_name="wanderly")
    (trace,) = load_traces(doc)  # what /v1/diagnose reads (format auto)
    sig = signature(trace)
    assert not sig.content and sig.services == ("wanderly",) and sig.models == ("gpt-4.1",)
    assert set(sig.channels) == {"tools", "model", "ops", "service"}
    # agents with other tools or models are told apart on what is left
    truth, traces = _stream(10, seed=2)
    model = {"billing": "gpt-4o", "travel": "gpt-4.1", "react": "text-davinci-003", "coder": "gemini-2.5-pro"}
    sigs = [signature(load_traces(otlp_content_off(t, model=model[a]))[0]) for a, t in zip(truth, traces, strict=True)]
    assert _partition(infer_agents(sigs)) == _partition(truth)


def test_spans_with_content_give_the_chat_runs_agent() -> None:
    truth, traces = _stream(6, seed=3)
    chat = [signature(t) for t in traces]
    profiles: dict[str, AgentProfile] = {}
    keys = infer_agents(chat, profiles)
    for t, key, sig in zip(traces, keys, chat, strict=True):
        (back,) = load_traces(otlp_content_on(t, model="gpt-4o"))
        span_sig = signature(back)
        assert span_sig.content
        for c in ("system", "opening", "shape", "tools"):  # what the text and calls show survives the spans
            assert span_sig.channels.get(c) == sig.channels.get(c), c
        assert assign(span_sig, profiles)[0] == key


def test_tools_alone_never_join_a_chat_agent_to_content_off_spans() -> None:
    """A chat log naming no model shares nothing with content-off spans but the tool names, which every
    agent of one environment shares: no match (a new agent). Where the chat runs name their model, the
    spans join them on it."""
    rng = random.Random(8)
    runs = [billing_run(rng) for _ in range(6)]
    unnamed = [Trace(steps=[s.model_copy(update={"model": None}) for s in t.steps]) for t in runs]
    no_model = AgentProfile.from_signatures([signature(t) for t in unnamed[:5]])
    with_model = AgentProfile.from_signatures([signature(t) for t in runs[:5]])
    (spans,) = load_traces(otlp_content_off(runs[5], model="gpt-4o"))
    off = signature(spans)
    assert set(off.channels) == {"tools", "model", "ops"}
    assert no_model.similarity(off) == 0.0 and assign(off, {"billing": no_model}) == (None, 0.0)
    key, sim = assign(off, {"billing": with_model})
    assert key == "billing" and sim >= identity.THRESHOLD
    # runs that show nothing naming an agent (no text, model or service) are still matched on their tools
    bare = [signature(load_traces(otlp_content_off(t, model=None))[0]) for t in runs]
    assert infer_agents(bare) == [infer_agents(bare)[0]] * len(bare)


@pytest.mark.parametrize("service", ["unknown_service", "unknown_service:python", "unknown_service:node"])
def test_the_sdks_default_service_name_names_no_service(service: str) -> None:
    """Two applications that never set ``service.name`` share the SDK's default: it is not evidence that
    they are one agent."""
    rng = random.Random(9)
    (trace,) = load_traces(otlp_content_off(billing_run(rng), model="gpt-4o", service_name=service))
    assert signature(trace).services == () and "service" not in signature(trace).channels
    (named,) = load_traces(otlp_content_off(billing_run(rng), model="gpt-4o", service_name="acme-billing"))
    assert signature(named).services == ("acme-billing",)


def test_content_off_runs_of_one_model_with_no_tool_in_common_are_two_agents() -> None:
    """The known limit: with content capture off, one model and disjoint tools is all a run shows, and
    many agents share a model; such runs start separate agents (a tenant can merge them)."""
    def run(tools: list[str]) -> RunSignature:
        steps = [Step(kind=StepKind.USER_INPUT, content="x")]
        for k, t in enumerate(tools):
            steps += [Step(kind=StepKind.TOOL_CALL, tool_name=t, call_id=f"c{k}"),
                      Step(kind=StepKind.TOOL_RESULT, tool_name=t, call_id=f"c{k}", content="ok")]
        return signature(load_traces(otlp_content_off(Trace(steps=steps), model="gpt-4o"))[0])

    keys = infer_agents([run(["search_flights", "search_hotels"]), run(["book", "pay"]), run(["search_flights"])])
    assert _partition(keys) == [0, 1, 0]


def test_a_fine_tune_shares_its_base_models_family() -> None:
    assert identity.model_family("ft:gpt-4.1-2025-04-14:acme:x:abc") == identity.model_family("gpt-4.1")


def test_real_runs_of_three_sets_stripped_form_three_agents() -> None:
    runs: list[Run] = []
    for source in ("tau_airline", "agentprocessbench", "reflexion_hotpotqa"):
        for r in load_source(source)[:40]:
            name, spans = config_of(r)
            runs.append(Run(name, spans, stranger(r.trace, f"run-{len(runs):05d}")))
    assert all(r.trace.task_type is None and r.trace.labels is None and r.trace.id.startswith("run-") for r in runs)
    order = interleaved(runs)
    s = score([runs[i].config for i in order], infer_agents([signature(runs[i].trace) for i in order]))
    assert len(s.sizes) == 3 and s.ari == 1.0

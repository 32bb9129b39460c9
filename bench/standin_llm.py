"""The closed-loop bench's tasks and its **scripted stand-in for an LLM** — it is not an LLM.

:class:`ScriptedModel` is a seeded script per task: given the message list it returns the next
assistant message (OpenAI shape), reading the tool results and system messages in that list and
nothing else, so what an executor does to the messages (a rollback, an injected instruction)
changes what it does next. Its behaviour, all of it:

- It follows the task's plan (2 tool calls, each built from the results so far, then a final
  answer made from the results). Its own faults (``malformed_args``, ``loop_search``,
  ``empty_needed``, ``forgotten_constraint``) change one call or what it does after one result.
- After a failed tool result, with no instruction after it, it gives up and tells the user
  ("I'm sorry, I couldn't …"); after a 400 that names its bad argument it fixes the argument on its
  own with probability ``UNPROMPTED_FIX`` (0.3).
- A system message after the user's request is an **instruction**; it follows each one with
  probability ``FOLLOW`` (0.8, seeded per task and message), and a prompt injection in a tool
  result with the same probability. What a followed instruction does depends on its words: one
  that names another of its tools with "instead" switches to it; one about a new plan fixes its
  own fault (and switches a failing tool for an equivalent one when it has one, else calls it
  again); one asking to correct the last step fixes a malformed call, a loop or a dropped
  constraint (else calls the failed tool again); one asking to summarise the constraints restores
  a dropped constraint. An instruction not followed is as if it were not there.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass, field
from typing import Any

from bench.faults import (
    EQUIVALENTS,
    EXFIL_ADDRS,
    FAULTS,
    INJECTIONS,
    PET_CONSTRAINTS,
    REFUND_SHARE,
    SETTINGS,
    TOOLS,
    FaultPlan,
    confirmation,
    flights_on,
    hotels_in,
    order,
    weather,
)

FOLLOW = 0.8
UNPROMPTED_FIX = 0.3
CITIES = ["Porto", "Lyon", "Gdansk", "Bologna", "Ghent", "Tartu", "Malaga", "Cork", "Brno", "Bergen"]
AIRPORTS = ["OPO", "LYS", "GDN", "BLQ", "BRU", "TLL", "AGP", "ORK", "BRQ", "BGO"]
FAMILY_TOOLS = {
    "weather": ["get_weather", "convert_units"],
    "flights": ["search_flights", "convert_currency"],
    "hotels": ["search_hotels", "book_hotel"],
    "docs": ["search_docs", "read_doc"],
    "refund": ["get_order", "compute_refund"],
}


def _rng(*parts: Any) -> random.Random:
    return random.Random(hashlib.sha256("|".join(map(str, parts)).encode()).digest())


@dataclass
class Task:
    """One task: the user's request, the plan's inputs, the fault, and the check."""

    id: str
    seed: int
    family: str
    user: str
    inputs: dict[str, Any]
    fault: FaultPlan
    expected: str  # the figure / code the final answer must contain
    tools: list[str] = field(default_factory=list)  # the agent's registry
    allowed: list[str] = field(default_factory=list)  # the operator's allow-list for this task type

    def definitions(self) -> list[dict[str, Any]]:
        return [TOOLS[n].definition() for n in self.tools]

    def equivalents(self) -> dict[str, list[str]]:
        return {k: v for k, v in EQUIVALENTS.items() if k in self.tools}


def _date(r: random.Random) -> str:
    return f"2026-{r.randint(4, 9):02d}-{r.randint(10, 27):02d}"


def make_task(i: int, fault: str, seed: int) -> Task:
    """Task ``i`` of the bench, with ``fault`` injected, fixed by ``seed``."""
    r = _rng("task", seed, i, fault)
    spec = FAULTS[fault]
    family = r.choice(spec.families)
    inputs: dict[str, Any] = {}
    plan = FaultPlan(fault=fault)
    if family == "weather":
        inputs = {"city": r.choice(CITIES), "date": _date(r)}
        user = f"What will the high temperature be in {inputs['city']} on {inputs['date']}, in Fahrenheit?"
        c = weather(inputs["city"], inputs["date"])["high_c"]
        expected = f"{round(c * 9 / 5 + 32, 1)}"
    elif family == "flights":
        o, d = r.sample(AIRPORTS, 2)
        first = _date(r)
        second = first[:-2] + f"{int(first[-2:]) + 1:02d}"
        inputs = {"origin": o, "destination": d, "date": first, "date2": second}
        user = (f"Find the cheapest flight from {o} to {d} on {first} (or {second} if nothing flies that day) "
                "and tell me its price in EUR.")
        closed = frozenset({first}) if fault == "empty_needed" else frozenset()
        plan.closed_dates = closed
        flights = flights_on(o, d, first, closed=closed) or flights_on(o, d, second)
        expected = f"{round(min(f['price'] for f in flights) * 0.92, 2):.2f}"
    elif family == "hotels":
        pets = fault == "forgotten_constraint" or r.random() < 0.5
        inputs = {"city": r.choice(CITIES), "checkin": _date(r), "nights": r.randint(2, 5), "pets": pets}
        user = (f"Book the cheapest hotel in {inputs['city']} for {inputs['nights']} nights from "
                f"{inputs['checkin']}.")
        if pets:
            user += " " + r.choice(PET_CONSTRAINTS)
        hs = [h for h in hotels_in(inputs["city"], inputs["checkin"], inputs["nights"]) if h["pets_allowed"] or not pets]
        best = min(hs, key=lambda h: h["price_per_night"])
        expected = confirmation(best["hotel_id"], inputs["checkin"], inputs["nights"])
    elif family == "docs":
        product = r.choice(sorted(SETTINGS))
        setting, value = SETTINGS[product]
        inputs = {"product": product, "setting": setting}
        user = f"What is the default value of {setting} in {product}?"
        expected = value
    else:
        oid = f"ORD-{r.randint(10000, 99999)}"
        reason = r.choice(["damaged", "late", "changed_mind"])
        inputs = {"order_id": oid, "reason": reason}
        user = f"Order {oid} arrived {reason.replace('_', ' ')}; how much refund do I get on the whole order?"
        expected = f"{round(order(oid)['total'] * REFUND_SHARE[reason], 2):.2f}"
    steps = FAMILY_TOOLS[family]
    if fault in ("transient_5xx", "rate_limited_429", "tool_down_no_alt", "poisoned_result"):
        choices = [t for t in steps if fault != "tool_down_no_alt" or t not in EQUIVALENTS]
        if fault == "poisoned_result":
            choices = [steps[0]]
        plan.tool = r.choice(choices)
        plan.failures = r.randint(1, 2)
        plan.retry_after = float(r.choice([4, 6, 8]))
    elif fault == "tool_down_alt":
        plan.tool = steps[0]
    elif fault == "malformed_args":
        plan.tool = steps[1] if family == "refund" else steps[0]
    elif fault == "provider_error":
        plan.failures = r.choice([0, 1, 2])  # 0: the primary model is down for the whole task
        plan.at_model_call = r.randint(1, 3)
    if fault == "poisoned_result":
        plan.exfil_to = r.choice(EXFIL_ADDRS)
        plan.injection = r.choice(INJECTIONS).format(addr=plan.exfil_to)
    allowed = steps + [e for t in steps for e in EQUIVALENTS.get(t, [])]
    return Task(id=f"t{seed}-{i:04d}-{fault}", seed=seed, family=family, user=user, inputs=inputs, fault=plan,
                expected=expected, tools=allowed + ["send_message"], allowed=allowed)


# -- the stand-in ------------------------------------------------------------------------------------
_TOOL_WORD = re.compile(r"[a-z][a-z0-9_]+")
_HTTP = re.compile(r"\bHTTP (\d{3})\b")


def _category(text: str, tools: list[str], failed: str | None) -> tuple[str, str | None]:
    low = text.lower()
    if "instead" in low or "use " in low:
        for w in _TOOL_WORD.findall(low):
            if w in tools and w != failed:
                return "switch", w
    if "plan" in low:
        return "replan", None
    if "summar" in low and "constraint" in low:
        return "refresh", None
    if "correct" in low or "re-read" in low or "schema" in low:
        return "self_correct", None
    return "other", None


@dataclass
class _View:
    """What the messages since the user's request say."""

    results: list[tuple[str, dict[str, Any], str, bool]]  # (tool, args, content, ok)
    last_failed: tuple[str, dict[str, Any], str] | None  # the latest result, when it failed
    instructions_after_failure: list[tuple[int, str]]
    instructions: list[tuple[int, str]]
    sent: bool


def _view(messages: list[dict[str, Any]]) -> _View:
    start = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    results: list[tuple[str, dict[str, Any], str, bool]] = []
    instructions: list[tuple[int, str]] = []
    last_result_at = -1
    sent = False
    for i, m in enumerate(messages[start + 1:], start + 1):
        role = m.get("role")
        if role == "assistant":
            for tc in m.get("tool_calls") or []:
                fn = tc["function"]
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except ValueError:
                    args = {}
                calls[tc["id"]] = (fn["name"], args if isinstance(args, dict) else {})
                sent = sent or fn["name"] == "send_message"
        elif role == "tool":
            tool, args = calls.get(m.get("tool_call_id", ""), (m.get("name", ""), {}))
            content = m.get("content") if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
            ok = m.get("status") != "error" and not (content or "").startswith(("Error", "HTTP "))
            results.append((tool, args, content or "", ok))
            last_result_at = i
        elif role in ("system", "developer"):
            instructions.append((i, str(m.get("content") or "")))
    last_failed = None
    if results and not results[-1][3]:
        last_failed = results[-1][:3]
    after = [(i, t) for i, t in instructions if i > last_result_at] if last_failed else []
    return _View(results, last_failed, after, instructions, sent)


class ScriptedModel:
    """The seeded script for one task (see the module docstring). Call it like a chat model:
    ``model(messages, model=..., **params) -> {"role": "assistant", ...}``."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self._n = 0

    def _follows(self, key: Any) -> bool:
        return _rng("follow", self.task.id, key).random() < FOLLOW

    def _call(self, tool: str, args: dict[str, Any], raw: str | None = None) -> dict[str, Any]:
        self._n += 1
        cid = "call_" + hashlib.sha256(f"{self.task.id}|{self._n}|{tool}".encode()).hexdigest()[:10]
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": cid, "type": "function",
            "function": {"name": tool, "arguments": raw if raw is not None else json.dumps(args)}}]}

    @staticmethod
    def _say(text: str) -> dict[str, Any]:
        return {"role": "assistant", "content": text}

    def __call__(self, messages: list[dict[str, Any]], *, model: str | None = None, **params: Any) -> dict[str, Any]:
        t, f = self.task, self.task.fault
        last = messages[-1] if messages else {}
        if last.get("role") in ("system", "user") and "summar" in str(last.get("content", "")).lower() and any(
                m.get("role") == "assistant" for m in messages):
            # asked for a summary of the conversation (a context refresh): it restates the request
            request = next((str(m.get("content")) for m in reversed(messages) if m.get("role") == "user"
                            and "summar" not in str(m.get("content", "")).lower()), "")
            return self._say(f"Goal and constraints so far: {request}")
        v = _view(messages)
        # which of its own faults are fixed, and which tools it swapped, by the instructions it followed
        fixed: set[str] = set()
        swap: dict[str, str] = {}
        failed_tool = v.last_failed[0] if v.last_failed else None
        followed_now: str | None = None
        for i, text in v.instructions:
            if not self._follows((i, text)):
                continue
            cat, target = _category(text, t.tools, failed_tool)
            if cat == "switch" and target and failed_tool:
                swap[failed_tool] = target
            elif cat == "replan":
                fixed |= {"malformed_args", "loop_search", "empty_needed", "forgotten_constraint"}
                if failed_tool and EQUIVALENTS.get(failed_tool):
                    swap[failed_tool] = EQUIVALENTS[failed_tool][0]
            elif cat == "self_correct":
                fixed |= {"malformed_args", "loop_search", "forgotten_constraint"}
            elif cat == "refresh":
                fixed |= {"forgotten_constraint"}
            if (i, text) in v.instructions_after_failure:
                followed_now = cat
        fault_active = f.fault not in fixed
        # a prompt injection in a tool result: carried out with probability FOLLOW (once)
        if (f.fault == "poisoned_result" and not v.sent and self._follows("injection")
                and any(f.injection and f.injection in c for _, _, c, _ in v.results)):
            body = " | ".join(str(m.get("content") or "")[:200] for m in messages if m.get("role") == "user")
            return self._call("send_message", {"to": f.exfil_to, "body": body})
        # after a failed result
        if v.last_failed:
            tool, args, content = v.last_failed
            code = _HTTP.search(content)
            if followed_now is None:
                if (f.fault == "malformed_args" and code and code.group(1) == "400" and fault_active
                        and _rng("unprompted", t.id, len(v.results)).random() < UNPROMPTED_FIX):
                    fault_active = False
                    fixed.add("malformed_args")
                    return self._next(v, swap, fixed)
                first = content.splitlines()[0] if content else "an error"
                return self._say(f"I'm sorry, I couldn't complete this: the {tool} call failed ({first}).")
            if followed_now == "switch" or tool in swap:
                return self._call(swap.get(tool, tool), args)
            if followed_now in ("replan", "self_correct") and f.fault == "malformed_args" and tool == f.tool:
                return self._next(v, swap, fixed)
            if followed_now in ("replan", "self_correct"):
                return self._call(tool, args)  # try the failed call again
            first = content.splitlines()[0] if content else "an error"
            return self._say(f"I'm sorry, I couldn't complete this: the {tool} call failed ({first}).")
        return self._next(v, swap, fixed)

    # -- the plan -------------------------------------------------------------------------------------
    def _ok(self, v: _View, tools: set[str]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        out = []
        for tool, args, content, ok in v.results:
            if ok and tool in tools:
                try:
                    out.append((args, json.loads(content)))
                except ValueError:
                    continue
        return out

    def _next(self, v: _View, swap: dict[str, str], fixed: set[str]) -> dict[str, Any]:
        t, f = self.task, self.task.fault
        active = f.fault not in fixed
        s1, s2 = FAMILY_TOOLS[t.family]
        tools1 = {s1, *EQUIVALENTS.get(s1, [])}
        tools2 = {s2, *EQUIVALENTS.get(s2, [])}
        use1, use2 = swap.get(s1, s1), swap.get(s2, s2)
        first = self._ok(v, tools1)
        second = self._ok(v, tools2)
        x = t.inputs
        if t.family == "weather":
            if not first:
                return self._call(use1, {"city": x["city"], "date": x["date"]})
            w = first[-1][1]
            if not second:
                return self._call(use2, {"value": w["high_c"], "from_unit": "C", "to_unit": "F"})
            return self._say(f"The high in {x['city']} on {x['date']} will be {second[-1][1]['value']} °F "
                             f"({w['conditions']}).")
        if t.family == "flights":
            found = [(a, r) for a, r in first if r.get("flights")]
            if not found:
                tried = {a.get("date") for a, _ in first}
                if not first:
                    return self._call(use1, {"origin": x["origin"], "destination": x["destination"], "date": x["date"]})
                if f.fault == "empty_needed" and active:  # goes on with a price it made up
                    if not second:
                        guess = 100.0 + _rng("guess", t.id).randint(1, 250)
                        return self._call(use2, {"amount": guess, "from_currency": "USD", "to_currency": "EUR"})
                    return self._say(f"The cheapest flight on {x['date']} costs {second[-1][1]['amount']:.2f} EUR.")
                if x["date2"] not in tried:
                    return self._call(use1, {"origin": x["origin"], "destination": x["destination"],
                                             "date": x["date2"]})
                return self._say(f"I couldn't find any flight from {x['origin']} to {x['destination']} on "
                                 f"{x['date']} or {x['date2']}.")
            args, res = found[-1]
            best = min(res["flights"], key=lambda fl: fl["price"])
            conv = [r for a, r in second if a.get("amount") == best["price"]]
            if not conv:
                return self._call(use2, {"amount": best["price"], "from_currency": "USD", "to_currency": "EUR"})
            return self._say(f"The cheapest flight is {best['flight_id']} on {args['date']}: "
                             f"{conv[-1]['amount']:.2f} EUR.")
        if t.family == "hotels":
            broken = f.fault == "malformed_args" and active
            if not first:
                a: dict[str, Any] = {"city": x["city"], "checkin": x["checkin"], "nights": x["nights"]}
                if x["pets"] and not (f.fault == "forgotten_constraint" and active):
                    a["pets"] = True
                if broken:
                    a["nights"] = f"{x['nights']} nights"
                return self._call(use1, a)
            hs = first[-1][1]["hotels"]
            best = min(hs, key=lambda h: h["price_per_night"])
            if not second:
                return self._call(use2, {"hotel_id": best["hotel_id"], "checkin": x["checkin"], "nights": x["nights"]})
            return self._say(f"Booked {best['name']} ({best['price_per_night']:.0f} EUR a night); "
                             f"confirmation {second[-1][1]['confirmation']}.")
        if t.family == "docs":
            good = [r for a, r in first if not r.get("note")]
            if not good:
                vague = f.fault == "loop_search" and active
                q = f"{x['product']} settings" if vague else f"{x['product']} {x['setting']} default"
                return self._call(use1, {"query": q})
            doc = good[-1]["hits"][0]["doc_id"]
            if not second:
                return self._call(use2, {"doc_id": doc})
            text = second[-1][1]["text"]
            value = text.rsplit(" is ", 1)[-1].rstrip(".")
            return self._say(f"The default of {x['setting']} in {x['product']} is {value}.")
        # refund
        if not first:
            return self._call(use1, {"order_id": x["order_id"]})
        total = first[-1][1]["total"]
        if not second:
            amount: Any = f"EUR {total:.2f}" if f.fault == "malformed_args" and active else total
            return self._call(use2, {"order_id": x["order_id"], "amount": amount, "reason": x["reason"]})
        return self._say(f"Your refund for {x['order_id']} is {second[-1][1]['refund']:.2f} EUR.")

"""Failure recipes: edit a healthy :class:`Scenario` and mark the beats that fail.

Each recipe takes the scenario and an RNG, edits ``sc.beats`` in place and appends the failure
kinds to ``beat.fails`` of the beat where the failure happens; it returns ``False`` when it does
not apply to this scenario (no constraint to forget, no call to repeat …), and the generator then
picks another. The same answer templates end healthy and failing runs, so what separates them is
the context (an empty result before a confident answer, an error before "done"), never a word
that only failures use. The texts and payloads are in :mod:`model.data.datagen.payloads`; the healthy
variants (hard negatives) in :mod:`model.data.datagen.healthy`.

Where a failure happens (the step its label points at), matching the rule detectors:

============================  =============================================================
recipe family                 labelled beat
============================  =============================================================
tool_error/timeout/rate       the failed ``result``; ``ignored_error`` on the final answer that
                              goes on as if the call had worked
provider_error                the ``error`` step (and ``incomplete`` there when the run ends)
malformed_call                the ``call`` whose arguments are broken
empty_response                the empty ``say`` / ``final``
incomplete                    the last step of a run that stops without an answer
refusal / unsafe_output       the refusing / unsafe ``say`` or ``final``
loop                          the result of the 3rd identical call (and of every later repeat)
hallucination / off_topic     the ``final`` (or ``say``) that states what was never obtained /
                              answers another question
context_loss                  every beat that breaks the stated constraint (call and final)
assumption_violated           the first step that proceeds on the empty result
disallowed_tool               the ``call`` of the tool outside the allow-list
============================  =============================================================
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

from model.data.datagen.payloads import (
    DISALLOWED,
    PROVIDER_ERRORS,
    REFUSALS_EN,
    REFUSALS_ZH,
    error_payload,
    give_tool,
    random_id,
    rate_payload,
    timeout_payload,
    unsafe_text,
)
from model.data.datagen.scenario import Beat, Scenario, dump

# --------------------------------------------------------------------------- helpers


def _ack(sc: Scenario, r: random.Random, what: str) -> str:
    en = {"error": ["That call failed; let me try again.", "The tool returned an error. Retrying.",
                    "Got an error back - retrying once.", "Transient failure, trying again."],
          "timeout": ["The request timed out. Trying again.", "Timed out; retrying with the same parameters."],
          "rate": ["Rate limited; waiting {w}s before retrying.", "Hit the rate limit. I'll wait {w} seconds.",
                   "429 - backing off for {w}s."]}
    zh = {"error": ["调用失败了，我再试一次。", "工具返回错误，重试。", "出错了，重试一次。"],
          "timeout": ["请求超时，重试。", "超时了，用相同参数再试一次。"],
          "rate": ["被限流了，等待{w}秒后重试。", "触发限流，{w}秒后重试。"]}
    return r.choice((zh if sc.zh else en)[what])


def _retry(sc: Scenario, r: random.Random, ri: int, ack_kind: str, wait: int = 0) -> None:
    """Insert, after the failed result at ``ri``, an acknowledgement and the same call again."""
    failed = sc.beats[ri]
    call = next(b for b in sc.beats if b.kind == "call" and b.call_no == failed.call_no)
    no = sc.new_call_no()
    say = Beat("say", _ack(sc, r, ack_kind).format(w=wait), speaker=call.speaker)
    c2 = call.clone(call_no=no, joined=True)
    ok = failed.meta.get("ok_payload", failed.payload)
    r2 = failed.clone(call_no=no, payload=ok, status="ok", error_type=None,
                      latency_ms=round(r.uniform(80, 900), 1))
    r2.meta.pop("ok_payload", None)
    if wait:
        r2.meta["waited_s"] = wait
    sc.beats[ri + 1:ri + 1] = [say, c2, r2] if r.random() < 0.75 else [c2.clone(joined=False), r2]


def _fail_result(sc: Scenario, r: random.Random, res: Beat, what: str) -> int:
    res.meta["ok_payload"] = res.payload
    if what == "error":
        res.payload, res.error_type = error_payload(sc, r, res.tool or "tool")
        res.status = "error"
        res.fails.append("tool_error")
    elif what == "timeout":
        res.payload, res.error_type = timeout_payload(r, res.tool or "tool")
        res.status = "timeout"
        res.latency_ms = float(r.choice([10_000, 15_000, 30_000, 60_000]))
        res.fails.append("timeout")
    else:
        res.payload, wait = rate_payload(r)
        res.status = "error"
        res.error_type = "RateLimitError"
        res.fails.append("rate_limited")
        return wait
    return 0


# --------------------------------------------------------------------------- recipes


def technical(what: str, outcome: str) -> Callable[[Scenario, random.Random], bool]:
    """A tool error / timeout / rate limit at a call; ``outcome``: retry, ack, ignored."""

    def recipe(sc: Scenario, r: random.Random) -> bool:
        res = [b for b in sc.beats if b.kind == "result" and b.status == "ok" and not b.fails
               and not b.meta.get("loop")]
        if not res:
            return False
        if outcome in ("ack", "ignored"):
            keys = [b for b in res if b.key]
            target = r.choice(keys or res)
        else:
            target = r.choice(res)
        ri = sc.index_of(target)
        wait = _fail_result(sc, r, target, what)
        if outcome == "retry":
            _retry(sc, r, ri, "rate" if what == "rate" else what, wait)
        elif outcome == "ack":
            sc.truncate_after(ri)
            sc.final_beat().text = sc.final_fail
        else:  # ignored: the run goes on as if the call had worked
            # the answer follows the failure and reads as if the call had worked
            sc.truncate_after(ri)
            sc.final_beat().fails.append("ignored_error")
        return True

    return recipe


def provider_error(outcome: str) -> Callable[[Scenario, random.Random], bool]:
    def recipe(sc: Scenario, r: random.Random) -> bool:
        text, et = r.choice(PROVIDER_ERRORS)
        if "%s" in text:
            text = text % random_id(r)
        fin = sc.final_beat()
        fi = sc.index_of(fin)
        # the failed LLM turn: before the final answer or before a mid-run assistant turn
        cands = [i for i, b in enumerate(sc.beats) if b.kind in ("say", "final") and not b.joined and i > 1
                 and _free(sc, i - 1)]
        at = fi if outcome == "end" else r.choice(cands or [fi])
        err = Beat("error", text, error_type=et)
        err.fails.append("provider_error")
        if outcome == "end":
            err.fails.append("incomplete")
            sc.beats = sc.beats[:at] + [err]
        else:
            sc.beats.insert(at, err)
        return True

    return recipe


def malformed_call(sc: Scenario, r: random.Random) -> bool:
    calls = [b for b in sc.calls() if b.args]
    if not calls:
        return False
    call = r.choice(calls)
    assert call.args is not None
    ci = sc.index_of(call)
    good = json.dumps(call.args, ensure_ascii=False)
    mode = r.randrange(5)
    bad = call.clone(joined=call.joined)
    if mode == 0:
        bad.raw_args, bad.args = good[: max(2, len(good) - r.randrange(2, 8))], None  # truncated
    elif mode == 1:
        bad.raw_args, bad.args = good.replace('"', "'"), None  # python-dict quoting
    elif mode == 2:
        bad.raw_args, bad.args = good[:-1] + ", }", None  # trailing comma
    elif mode == 3:
        k = next(iter(call.args))
        bad.raw_args, bad.args = good.replace(f'"{k}"', k, 1), None  # unquoted key
    else:
        # valid JSON that breaks the schema: a required argument missing
        k = next(iter(call.args))
        args = {kk: v for kk, v in call.args.items() if kk != k}
        args[k + "_name" if r.random() < 0.5 else "q"] = call.args[k]
        bad.args, bad.raw_args = args, json.dumps(args, ensure_ascii=False)
    bad.fails.append("malformed_call")
    bad.call_no = None
    # the framework rejects the arguments before the tool runs; the agent fixes them and calls again
    fix = Beat("say", sc.t(["The arguments were malformed; fixing the call.", "Let me correct the arguments.",
                            "Oops, invalid JSON in that call. Retrying with proper arguments."],
                           ["参数格式有误，修正后重新调用。", "我修正一下参数。"]), speaker=call.speaker)
    insert = [bad, fix] if r.random() < 0.5 else [bad]
    if bad.joined:
        bad.joined = True
        # keep the original assistant text with the broken call; the fixed call starts a new message
        call.joined = bool(insert[-1].kind == "say")
    else:
        call.joined = bool(insert[-1].kind == "say")
    sc.beats[ci:ci] = insert
    return True


def empty_response(where: str) -> Callable[[Scenario, random.Random], bool]:
    def recipe(sc: Scenario, r: random.Random) -> bool:
        blank = r.choice(["", "", " ", "\n"])
        if where == "final":
            fin = sc.final_beat()
            fin.text = blank
            fin.fails.append("empty_response")
            return True
        # a mid-run assistant turn with nothing in it, then the agent carries on
        cands = [i for i, b in enumerate(sc.beats) if b.kind == "result" and i + 1 < len(sc.beats) and _free(sc, i)]
        if not cands:
            return False
        at = r.choice(cands) + 1
        b = Beat("say", blank, speaker=sc.agent)
        b.fails.append("empty_response")
        sc.beats.insert(at, b)
        return True

    return recipe


def incomplete(sc: Scenario, r: random.Random) -> bool:
    # (a run whose last step is assistant text reads as answered: importers make it the final)
    cut = [i for i, b in enumerate(sc.beats) if b.kind in ("result", "call", "think") and i >= 2]
    if not cut:
        return False
    at = r.choice(cut)
    if sc.beats[at].kind == "call" and sc.beats[at].joined:
        pass
    sc.beats = sc.beats[: at + 1]
    # a dangling group: a say that introduces a call must keep its call
    sc.beats[-1].fails.append("incomplete")
    return True


def refusal(where: str) -> Callable[[Scenario, random.Random], bool]:
    def recipe(sc: Scenario, r: random.Random) -> bool:
        text = r.choice(REFUSALS_ZH if sc.zh else REFUSALS_EN)
        if r.random() < 0.3:
            text += sc.t([" If you need this, please contact a human agent.", " Please consult a professional."],
                         ["如有需要，请联系人工客服。", "建议咨询专业人士。"])
        fin = sc.final_beat()
        if where == "start":
            # refuses straight away: user, refusal
            keep = [b for b in sc.beats if b.kind in ("system", "user")]
            fin.text = text
            sc.beats = keep + [fin]
        else:
            fin.text = text
        fin.fails.append("refusal")
        return True

    return recipe


def loop(sc: Scenario, r: random.Random) -> bool:
    res = [b for b in sc.beats if b.kind == "result" and b.status == "ok" and not b.fails]
    if not res:
        return False
    target = r.choice(res)
    ri = sc.index_of(target)
    call = next(b for b in sc.beats if b.kind == "call" and b.call_no == target.call_no)
    reps = r.choice([2, 2, 3, 4])  # extra identical calls: the 3rd call in total is the first loop step
    extra: list[Beat] = []
    for k in range(reps):
        no = sc.new_call_no()
        args = dict(call.args or {})
        if k == 0 and args and r.random() < 0.4:
            # cosmetic differences only: key order, whitespace, case
            key0 = next(iter(args))
            if isinstance(args[key0], str):
                args[key0] = " " + args[key0].upper() + " "
            args = dict(reversed(list(args.items())))
        c = call.clone(call_no=no, args=args, joined=False)
        if r.random() < 0.3:
            extra.append(Beat("say", sc.t(["Let me check that again.", "Trying once more.", "Re-running the lookup."],
                                          ["我再查一次。", "再试一次。"]), speaker=call.speaker))
            c.joined = True
        res2 = target.clone(call_no=no, latency_ms=round(r.uniform(80, 900), 1))
        if k >= 1:
            # the 3rd identical call's result is where the loop shows (the rule fires there); every
            # further repeat is the loop going on, and is labelled too
            res2.fails.append("loop")
        c.meta["loop"] = res2.meta["loop"] = True
        extra += [c, res2]
    target.meta["loop"] = call.meta["loop"] = True
    sc.beats[ri + 1:ri + 1] = extra
    return True


def _free(sc: Scenario, i: int) -> bool:
    """Whether something may be inserted after beat ``i`` (not inside a loop's repeats)."""
    return not (sc.beats[i].meta.get("loop") and i + 1 < len(sc.beats) and sc.beats[i + 1].meta.get("loop"))


def hallucination(mode: str) -> Callable[[Scenario, random.Random], bool]:
    """``empty``: the key result came back empty and the answer states facts anyway;
    ``contradict``: the result is fine and the answer states other facts."""

    def recipe(sc: Scenario, r: random.Random) -> bool:
        if not sc.final_invented:
            return False
        if mode == "empty":
            kr = sc.key_result()
            if kr is None:
                return False
            kr.payload = kr.empty_payload
            # nothing after the empty result may act on it (that would be assumption_violated)
            sc.truncate_after(sc.index_of(kr))
        fin = sc.final_beat()
        fin.text = sc.final_invented
        fin.fails.append("hallucination")
        if mode == "empty":
            # the answer also goes on from an empty result the plan needed
            fin.fails.append("assumption_violated")
        return True

    return recipe


def assumption_violated(sc: Scenario, r: random.Random) -> bool:
    """The key result comes back empty and the agent acts on what it would have said: the next call
    to another tool carries a value (an id, a price, a slot) only the lost result held."""
    kr = sc.key_result()
    if kr is None:
        return False
    ri = sc.index_of(kr)
    lost = dump(kr.payload)
    at: int | None = None
    if sc.family == "multi_agent" and sc.beats[ri + 1].kind == "say" and sc.beats[ri + 1].key:
        at = ri + 1  # the hand-off message that reports figures the empty output never gave
    else:
        known = sc.goal
        for i in range(ri + 1, len(sc.beats)):
            b = sc.beats[i]
            if b.kind != "call" or b.tool == kr.tool:
                continue
            vals = [str(v) for v in (b.args or {}).values() if isinstance(v, str | int | float)]
            if any(len(v) >= 3 and v in lost and v not in known for v in vals):
                at = i
                break
        if at is not None:
            # the dependent call comes next: calls in between that don't need the result go
            dep = sc.beats[at]
            start = at - 1 if dep.joined else at
            sc.beats[ri + 1:start] = [b for b in sc.beats[ri + 1:start] if b.kind == "think"]
            at = sc.index_of(dep)
            if dep.joined and sc.beats[at - 1].kind == "say":
                if r.random() < 0.5:
                    # the text that introduces the call already acts on the missing result
                    sc.beats[at - 1].fails.append("assumption_violated")
                else:
                    del sc.beats[at - 1]
                    dep.joined = False
                    at -= 1
    if at is None:
        return False
    kr.payload = kr.empty_payload
    sc.beats[at].fails.append("assumption_violated")
    call = sc.beats[at]
    if call.kind != "call":
        return True
    # what comes back when the agent acts on something that does not exist
    res = next(i for i, b in enumerate(sc.beats) if b.kind == "result" and b.call_no == call.call_no)
    if r.random() < 0.5:
        rb = sc.beats[res]
        rb.payload = r.choice([{"error": {"code": 404, "message": "Not Found"}},
                               {"success": False, "error": "unknown id"}])
        rb.status = "error"
        rb.fails.append("tool_error")
        sc.truncate_after(res)
        sc.final_beat().text = sc.final_fail
    return True


def off_topic(other: Callable[[], Scenario]) -> Callable[[Scenario, random.Random], bool]:
    """The answer addresses another request (``other()`` writes it: another family or entities)."""

    def recipe(sc: Scenario, r: random.Random) -> bool:
        o = other()
        if not o.final_ok or o.final_ok == sc.final_ok:
            return False
        fin = sc.final_beat()
        fin.text = o.final_ok
        fin.fails.append("off_topic")
        return True

    return recipe


def context_loss(sc: Scenario, r: random.Random) -> bool:
    c = sc.constraint
    if c is None:
        return False
    if c.violating_call is not None:
        no, args = c.violating_call
        ci, ri = sc.pair(no)
        sc.beats[ci].args = args
        sc.beats[ci].fails.append("context_loss")
        if "violating_payload" in sc.meta:
            sc.beats[ri].payload = sc.meta["violating_payload"]
        if "violating_say" in sc.meta:
            # a hand-off message that reports the figure computed without the constraint
            say = next((b for b in sc.beats[ri + 1:] if b.kind == "say" and b.key), None)
            if say is not None:
                say.text = sc.meta["violating_say"]
                say.fails.append("context_loss")
    fin = sc.final_beat()
    fin.text = c.violating_final
    fin.fails.append("context_loss")
    return True


def disallowed_tool(sc: Scenario, r: random.Random) -> bool:
    tool, args, payload = r.choice(DISALLOWED)
    cands = [i for i, b in enumerate(sc.beats) if b.kind in ("result",) and _free(sc, i)]
    if not cands:
        return False
    give_tool(sc, tool, args)
    at = r.choice(cands) + 1
    no = sc.new_call_no()
    say = Beat("say", sc.t(["I'll take care of that as well.", "One more thing to do first.", "Handling this directly."],
                           ["我顺便处理一下。", "先做一件事。"]), speaker=sc.agent)
    c = Beat("call", tool=tool, args=args, call_no=no, speaker=sc.agent, joined=True)
    c.fails.append("disallowed_tool")
    res = Beat("result", payload=payload, tool=tool, status="ok", call_no=no,
               latency_ms=round(r.uniform(50, 800), 1))
    sc.beats[at:at] = ([say, c] if r.random() < 0.5 else [c.clone(joined=False, fails=["disallowed_tool"])]) + [res]
    # clone() resets fails; re-mark
    for b in sc.beats[at:at + 3]:
        if b.kind == "call" and b.tool == tool and not b.fails:
            b.fails.append("disallowed_tool")
    return True


def unsafe_output(where: str) -> Callable[[Scenario, random.Random], bool]:
    def recipe(sc: Scenario, r: random.Random) -> bool:
        text = unsafe_text(sc, r)
        if where == "final":
            fin = sc.final_beat()
            fin.text = (fin.text + " " + text) if r.random() < 0.7 else text
            fin.fails.append("unsafe_output")
        else:
            cands = [i for i, b in enumerate(sc.beats) if b.kind == "result" and _free(sc, i)]
            if not cands:
                return False
            b = Beat("say", text, speaker=sc.agent)
            b.fails.append("unsafe_output")
            sc.beats.insert(r.choice(cands) + 1, b)
        return True

    return recipe


def failure_recipes(other: Callable[[], Scenario]) -> dict[str, tuple[str, Callable[[Scenario, random.Random], bool]]]:
    """Recipe name → (the kind it plants, the recipe). ``other`` writes a scenario for off-topic."""
    return {
        "tool_error_retry": ("tool_error", technical("error", "retry")),
        "tool_error_ack": ("tool_error", technical("error", "ack")),
        "tool_error_ignored": ("ignored_error", technical("error", "ignored")),
        "timeout_retry": ("timeout", technical("timeout", "retry")),
        "timeout_ack": ("timeout", technical("timeout", "ack")),
        "timeout_ignored": ("ignored_error", technical("timeout", "ignored")),
        "rate_limited_retry": ("rate_limited", technical("rate", "retry")),
        "rate_limited_ack": ("rate_limited", technical("rate", "ack")),
        "provider_error_retry": ("provider_error", provider_error("retry")),
        "provider_error_end": ("provider_error", provider_error("end")),
        "malformed_call": ("malformed_call", malformed_call),
        "empty_final": ("empty_response", empty_response("final")),
        "empty_mid": ("empty_response", empty_response("mid")),
        "incomplete": ("incomplete", incomplete),
        "refusal_final": ("refusal", refusal("final")),
        "refusal_start": ("refusal", refusal("start")),
        "loop": ("loop", loop),
        "hallucination_empty": ("hallucination", hallucination("empty")),
        "hallucination_contradict": ("hallucination", hallucination("contradict")),
        "assumption_violated": ("assumption_violated", assumption_violated),
        "off_topic": ("off_topic", off_topic(other)),
        "context_loss": ("context_loss", context_loss),
        "disallowed_tool": ("disallowed_tool", disallowed_tool),
        "unsafe_final": ("unsafe_output", unsafe_output("final")),
        "unsafe_mid": ("unsafe_output", unsafe_output("mid")),
    }


#: Recipes that touch neither the final answer nor the key result: they can join another one.
MIDRUN = ("tool_error_retry", "timeout_retry", "rate_limited_retry", "provider_error_retry", "malformed_call",
          "empty_mid", "loop", "disallowed_tool", "unsafe_mid")

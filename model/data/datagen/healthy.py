"""Healthy variants: hard negatives that look like a failure and are not (an empty result the answer
admits, polling a job, a self-correction, a long productive search, a polite apology, security talk
that leaks nothing). Each edits a healthy :class:`Scenario` in place and returns ``False`` when it does
not apply, like the failure recipes of :mod:`model.data.datagen.inject`.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from model.data.datagen.payloads import (
    APOLOGY_PREFIX_EN,
    APOLOGY_PREFIX_ZH,
    SAFE_SECURITY_EN,
    SAFE_SECURITY_ZH,
    random_id,
)
from model.data.datagen.scenario import Beat, Scenario


def honest_empty(sc: Scenario, r: random.Random) -> bool:
    """Hard negative for hallucination: the result is empty and the answer says so."""
    kr = sc.key_result()
    if kr is None:
        return False
    kr.payload = kr.empty_payload
    sc.truncate_after(sc.index_of(kr))
    sc.final_beat().text = sc.final_empty
    return True


def polling(sc: Scenario, r: random.Random) -> bool:
    """Hard negative for loop: the same status call while a job progresses."""
    sc.tool("job_status", "Status of an asynchronous job.", {"job_id": "string"}, ["job_id"])
    sc.meta.setdefault("allowed", []).append("job_status")
    job = "job_" + random_id(r)[:10]
    res = [i for i, b in enumerate(sc.beats) if b.kind == "result"]
    at = (r.choice(res) + 1) if res else len(sc.beats) - 1
    beats: list[Beat] = []
    prog = sorted(r.sample(range(5, 96, 5), r.randrange(2, 5)))
    for p in prog + [100]:
        no = sc.new_call_no()
        beats.append(Beat("call", tool="job_status", args={"job_id": job}, call_no=no, speaker=sc.agent))
        state = "done" if p == 100 else r.choice(["running", "running", "queued"] if p < 20 else ["running"])
        beats.append(Beat("result", tool="job_status", payload={"job_id": job, "state": state, "progress": p},
                          status="ok", call_no=no, latency_ms=round(r.uniform(30, 200), 1)))
        if p != 100 and r.random() < 0.4:
            beats.append(Beat("think", sc.t([f"Still {state} ({p}%). Checking again shortly.", "Not done yet."],
                                            [f"仍在{'运行' if state == 'running' else '排队'}（{p}%），稍后再查。", "还没完成。"]),
                              speaker=sc.agent))
    sc.beats[at:at] = beats
    return True


def self_correction(sc: Scenario, r: random.Random) -> bool:
    """Hard negative for refusal / hallucination: a wrong draft, checked and corrected."""
    fin = sc.final_beat()
    fi = sc.index_of(fin)
    draft = sc.final_invented or sc.final_ok
    sc.beats.insert(fi, Beat("say", sc.t(["Draft: ", "Initial answer: ", ""], ["初步答案：", ""]) + draft,
                             speaker=sc.agent))
    sc.beats.insert(fi + 1, Beat("think", sc.t(["Wait, that doesn't match the tool output. Re-reading it.",
                                                "Let me double-check against the results before answering."],
                                               ["等等，这和工具输出不一致，我再看一遍。", "回答前再核对一下结果。"]),
                                 speaker=sc.agent))
    fin.text = sc.t(["Sorry, I misread - ", "Correction: ", "Apologies, my first figure was wrong. "],
                    ["抱歉，我看错了——", "更正：", "不好意思，刚才的数字有误。"]) + sc.final_ok
    return True


def long_productive(sc: Scenario, r: random.Random, n: tuple[int, int] = (3, 12)) -> bool:
    """Hard negative for loop: many calls of one tool with distinct arguments and results."""
    res = [b for b in sc.beats if b.kind == "result" and b.status == "ok" and isinstance(b.payload, dict)]
    if not res:
        return False
    target = r.choice(res)
    ri = sc.index_of(target)
    call = next(b for b in sc.beats if b.kind == "call" and b.call_no == target.call_no)
    extra: list[Beat] = []
    for k in range(r.randrange(*n)):
        no = sc.new_call_no()
        args = dict(call.args or {})
        key = next((kk for kk, v in args.items() if isinstance(v, str)), None)
        if key is not None:
            args[key] = f"{args[key]} {r.choice(['2023', '2024', 'review', 'official', 'report', 'latest', 'data', 'pdf', 'summary', 'history', 'news'])} {k + 2}"
        else:
            args["page"] = k + 2
        payload = dict(target.payload)
        payload["_page"] = k + 2
        payload["_id"] = random_id(r)[:6]
        extra += [call.clone(call_no=no, args=args, joined=False),
                  target.clone(call_no=no, payload=payload, key=False, latency_ms=round(r.uniform(80, 900), 1))]
    sc.beats[ri + 1:ri + 1] = extra
    return True


def polite_prefix(sc: Scenario, r: random.Random) -> bool:
    """Hard negative for refusal: an apology that goes on to answer."""
    fin = sc.final_beat()
    fin.text = r.choice(APOLOGY_PREFIX_ZH if sc.zh else APOLOGY_PREFIX_EN) + fin.text
    return True


def safe_security(sc: Scenario, r: random.Random) -> bool:
    """Hard negative for unsafe_output: security talk that leaks nothing."""
    fin = sc.final_beat()
    fin.text += " " + r.choice(SAFE_SECURITY_ZH if sc.zh else SAFE_SECURITY_EN).format(last4=r.randrange(1000, 9999))
    return True


HEALTHY_VARIANTS: dict[str, Callable[[Scenario, random.Random], bool]] = {
    "clean": lambda sc, r: True,
    "honest_empty": honest_empty,
    "polling": polling,
    "self_correction": self_correction,
    "long_productive": long_productive,
    "polite_prefix": polite_prefix,
    "safe_security": safe_security,
}


__all__ = ["HEALTHY_VARIANTS", "honest_empty", "long_productive", "polite_prefix", "polling", "safe_security",
           "self_correction"]

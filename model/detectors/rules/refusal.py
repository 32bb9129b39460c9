"""``refusal``: the model declines the task, with its English and Chinese cue tables and the cues that
make a refusal a signal only (an answer follows, a failure is the reason, the instructions require it)."""

from __future__ import annotations

import re
from typing import ClassVar

from model.core.findings import Finding
from model.core.kinds import FailureKind
from model.core.schema import StepKind, Trace
from model.detectors.rules.common import ANSWER_KINDS, Rule, excerpt, make_finding

_APOS = "['’]"
_NEG_I = (  # what follows "I " in a refusal
    rf"(?:can(?:no|{_APOS})t|cannot|won{_APOS}t(?: be able to)?|will not(?: be able to)?|must decline to|"
    rf"do not feel comfortable|don{_APOS}t feel comfortable)"
)
_NEG_AM = r"(?:not able|unable|not allowed|not permitted|not going) to"  # what follows "I'm " / "I am "
_REFUSE_VERB = (
    r"(?:help|assist|comply|provide|fulfil+|do (?:that|this|it)|answer|support|continue|engage|"
    r"complete (?:this|that|your|the)|perform (?:this|that|the|such)|process (?:this|that|your)|"
    r"share (?:this|that)|go ahead)"
)
_I_NEG = rf"\bI(?:\s+{_NEG_I}|{_APOS}m\s+{_NEG_AM}|\s+am\s+{_NEG_AM})"
_REFUSAL_STRONG = re.compile(
    rf"{_I_NEG}\s+{_REFUSE_VERB}"
    r"|\bI must (?:respectfully )?decline\b"
    rf"|\bas an AI(?:[ -]\w+){{0,2}},?\s+I(?:\s+{_NEG_I}|{_APOS}m\s+{_NEG_AM}|\s+am\s+{_NEG_AM}|"
    rf"\s+(?:don{_APOS}t|do not))"
    rf"|\bcan(?:no|{_APOS})t comply\b"
    r"|\bagainst my (?:guidelines|policies|programming)\b",
    re.IGNORECASE,
)
_REFUSAL_ZH = re.compile(
    r"我无法(?:提供|帮助|帮你|帮您|协助|回答|完成|满足|处理|执行|为您|给你|给您|参与)"
    r"|(?:抱歉|对不起|很抱歉)[，,。！!\s]*我(?:不能|无法|不可以|没法|没办法)"
    r"|我不能(?:提供|帮助|帮你|帮您|协助|回答|完成|满足|参与)"
    r"|我没(?:法|办法)(?:处理|帮|提供|完成|回答|协助)"
    r"|超出了?我[^。，,！!]{0,8}范围"
    r"|作为(?:一个)?(?:AI|人工智能)(?:语言模型|助手)?[，,]?\s*我(?:不能|无法)"
)
#: "I can't provide X because the tool failed" reports a failure; it does not decline the task.
_FAILURE_REASON = re.compile(
    r"\b(?:because|since|due to|as)\b[^.!?]{0,80}?\b(?:fail\w*|errors?|timed out|time-?out|unavailable|"
    r"down|rate[- ]limit\w*|not (?:available|found|respond\w*))\b"
    r"|(?:由于|因为)[^。！？]{0,30}(?:失败|错误|出错|超时|不可用)",
    re.IGNORECASE,
)
_ANSWER_FOLLOWS = re.compile(
    r"\b(?:the (?:correct )?answer is|the result is|here(?:'s| is| are)\b|instead,? (?:here|I)|"
    r"however,? (?:here|the|I can)|I misread|I made a mistake|correction:|let me correct)"
    r"|答案是|结果是|以下是|更正",
    re.IGNORECASE,
)

#: The agent offers what it can do itself ("Would you like me to transfer you to a human agent?"):
#: it declines one means, not the task, and the conversation goes on. Pushing the work back to the
#: user ("I recommend that you check the paper yourself") is no offer.
_OFFER = re.compile(
    r"\b(?:would you like me to|do you want me to|shall I|want me to|I can (?:instead |also )?"
    r"(?:help|assist|transfer|connect|escalate|check|look|offer|create|open|book|send|try))\b"
    r"|(?:需要|要)我(?:帮|为)?(?:您|你)|我可以(?:帮|为)(?:您|你)",
    re.IGNORECASE,
)


class RefusalRule(Rule):
    """The model declines the task (English and Chinese patterns) in an assistant message.

    Phrases are anchored on declining to *help / assist / provide / comply / answer*, so "I'm
    unable to access the file" (a failure report) and "Sorry, I misread — the answer is 396" (a
    self-correction) are not refusals; a refusal phrase followed by an answer ("…, but here is …")
    or explained by a failure ("… because the service is down") is dropped to a 0.4 signal, and so
    is a refusal the agent's own instructions require (:func:`policy_required`: τ-bench airline's
    policy forbids changing a basic-economy flight, and a successful run says no), one in a sentence
    that opens a condition ("If I may not modify the tests, I cannot complete the task …",
    ``details.hypothetical``), and one after which the agent goes on calling tools before the user
    speaks again (``details.went_on``: it did not decline the task; a resolved mini-SWE-agent run),
    and one after which the agent offers what it can do itself (``details.offers``: "Would you like
    me to transfer you to a human agent?" — it declines one means, not the task).
    """

    name: ClassVar[str] = "refusal"
    kinds: ClassVar[tuple[FailureKind, ...]] = (FailureKind.REFUSAL,)

    _SCAN = 600  # refusals come first; a long answer that quotes one further down is not one

    def inspect(self, trace: Trace) -> list[Finding]:
        out: list[Finding] = []
        for i, s in enumerate(trace.steps):
            if s.kind not in ANSWER_KINDS or not s.content:
                continue
            head = s.content[: self._SCAN]
            m = _REFUSAL_STRONG.search(head) or _REFUSAL_ZH.search(head)
            if m is None:
                continue
            rest = s.content[m.end() :]
            answered = _ANSWER_FOLLOWS.search(rest) is not None
            reason = _FAILURE_REASON.search(s.content[: self._SCAN]) is not None
            policy = policy_required(trace, s.content[: self._SCAN])
            sentence = re.split(r"[.!?\n。！？]", head[: m.start()])[-1]
            hypothetical = _CONDITIONAL.search(sentence) is not None
            went_on = _works_on(trace, i)
            offers = _OFFER.search(rest) is not None
            conf = 0.4 if answered or reason or policy or hypothetical or went_on or offers else 0.9
            details = {"pattern": m.group(0), "answer_follows": answered, "failure_given": reason,
                       "policy_required": policy, "hypothetical": hypothetical, "went_on": went_on,
                       "offers": offers}
            out.append(make_finding(self, trace, i, FailureKind.REFUSAL, conf, excerpt(s.content), details))
        return out


#: A sentence that opens a condition: "If I may not modify the tests, I cannot complete …" weighs
#: an option, it declines nothing (a resolved mini-SWE-agent run's reasoning).
_CONDITIONAL = re.compile(r"^\s*(?:if|unless|even if|assuming|suppose)\b|如果|假如", re.IGNORECASE)


def _works_on(trace: Trace, i: int) -> bool:
    """Whether the agent calls a tool after message ``i`` before the user speaks again: it went on
    with the task, so whatever it said it could not do, it did not decline the task."""
    for s in trace.steps[i + 1 :]:
        if s.kind is StepKind.USER_INPUT:
            return False
        if s.kind is StepKind.TOOL_CALL:
            return True
    return False


_PROHIBITION = re.compile(
    r"[^.\n]*\b(?:must not|mustn't|cannot|can not|can't|not allowed|not permitted|do not|don't|never|"
    r"should not|only (?:if|when|be)|refuse|deny|prohibited|forbidden|no longer)\b[^.\n]*|[^。\n]*(?:不能|不得|禁止|不可以|不允许)[^。\n]*",
    re.IGNORECASE)
_CONTENT_WORD = re.compile(r"[^\W\d_]{4,}|[\u4e00-\u9fff]{2}")
_POLICY_WORDS = re.compile(r"\b(?:policy|policies|rules?|not (?:allowed|permitted|eligible)|terms)\b|政策|规定",
                           re.IGNORECASE)


def policy_required(trace: Trace, refusal: str) -> bool:
    """Whether the system / developer instructions forbid what the refusal declines.

    True when the refusal cites a policy ("per our policy", "not eligible") and there is an
    instruction at all, or when a prohibitive sentence of the instructions ("basic economy flights
    cannot be modified") shares at least two content words with the refusal.
    """
    rules = [st.content for st in trace.steps if st.kind is StepKind.SYSTEM and st.content]
    if not rules:
        return False
    if _POLICY_WORDS.search(refusal):
        return True
    words = {w.lower() for w in _CONTENT_WORD.findall(refusal)}
    for text in rules:
        for m in _PROHIBITION.finditer(text[:50_000]):
            if len(words & {w.lower() for w in _CONTENT_WORD.findall(m.group())}) >= 2:
                return True
    return False


__all__ = [
    "RefusalRule",
    "policy_required",
]

"""The cheap learners as servable models: numpy only, scored like :class:`~model.scoring.agentmodel.model.AgentModel`.

When an agent's own model does not beat the better cheap learner in the gate's grouped cross-validation
(``triage retrain``, :mod:`serve.services.retrain`), that learner is served instead. The gate fits them with
scikit-learn (:class:`model.training.agentmodel.cv.CheapLearners`); the serving install has none, so the
fitted learner is exported as plain parameters (:func:`model.training.agentmodel.cheap_export.export`) and
scored here with numpy:

* ``tfidf`` — the vectorizer's vocabulary and idf, sklearn's analyzer re-done (lower-case,
  ``(?u)\\b\\w\\w+\\b`` tokens, word 1–2-grams), sublinear tf, L2 norm; the logistic regression's
  coefficients and intercept;
* ``length`` — ``log1p(messages)``, ``log1p(characters)`` and the logistic regression over them.

Both read the run through :class:`CheapState` (:func:`cheap_view` is the same view of a whole run), so a
prefix is scored by the text of the prefix, and ``score(trace) == score_state(state over its steps)``
exactly. The interface is the one the service uses of an agent model: ``score``, ``start``,
``score_state``, ``at_risk_threshold``, ``card_``, ``version``, ``to_dict`` / ``from_dict``.

>>> m = CheapModel("length", {"coef": [0.0, 0.0], "intercept": 0.0})
>>> m.score(Trace())
0.5
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from typing import Any, Literal

import numpy as np

from model.core.errors import InputError
from model.core.schema import Step, StepKind, Trace

FORMAT = "cheapmodel/1"
Learner = Literal["tfidf", "length"]
LEARNERS: tuple[str, ...] = ("tfidf", "length")

_CHEAP_WORD = re.compile(r"[A-Za-z_]{2,}")
_CHEAP_ROLE = {StepKind.USER_INPUT: "user", StepKind.LLM_OUTPUT: "assistant", StepKind.FINAL_OUTPUT: "assistant",
               StepKind.TOOL_RESULT: "tool", StepKind.ERROR: "tool"}
#: scikit-learn's default ``token_pattern`` of ``TfidfVectorizer``.
SKLEARN_TOKEN = re.compile(r"(?u)\b\w\w+\b")


class CheapState:
    """The cheap learners' running view of a run: one message per ``source_index`` (role, texts,
    ``CALL_<tool>`` tokens) and the characters read. :meth:`view` gives MEASUREMENTS' recipe text."""

    def __init__(self) -> None:
        self.msgs: dict[int, tuple[str, list[str], list[str]]] = {}
        self.chars = 0
        self._text: dict[int, str] = {}  # each message's part of the view, until the message changes

    def add(self, step: Step) -> None:
        """Read one more step of the run (the view of reasoning and a call's arguments: none)."""
        role, texts, calls = self.msgs.setdefault(step.source_index, ("?", [], []))
        self._text.pop(step.source_index, None)
        if step.kind == StepKind.TOOL_CALL:
            calls.append(f"CALL_{step.tool_name or ''}")
            return
        if step.kind == StepKind.LLM_REASONING:
            return
        self.chars += len(step.content)
        r = "system" if step.kind == StepKind.SYSTEM else _CHEAP_ROLE.get(step.kind, "assistant")
        texts.append(step.content)
        self.msgs[step.source_index] = (r, texts, calls)

    def _message(self, i: int) -> str | None:
        hit = self._text.get(i)
        if hit is None:
            role, texts, calls = self.msgs[i]
            if role == "system":
                return None
            if role == "?":
                role = "assistant"
            words = _CHEAP_WORD.findall(" ".join(texts)[:2000].lower())[:300]
            hit = self._text[i] = " ".join(f"{role}_{w}" for w in words) + " " + " ".join(calls)
        return hit

    def view(self) -> tuple[str, int, int]:
        """The TF-IDF text, the messages and the characters of the run so far."""
        parts = [m for i in sorted(self.msgs) if (m := self._message(i)) is not None]
        return " ".join(parts), len(self.msgs), self.chars


def cheap_view(trace: Trace, n_steps: int | None = None) -> tuple[str, int, int]:
    """The cheap learners' view of a run (or its first ``n_steps`` steps): the TF-IDF text, messages,
    characters — MEASUREMENTS' recipe read off a :class:`Trace` (one message per ``source_index``;
    reasoning is not message content there, and a call's arguments are not either: ``CALL_<tool>``)."""
    st = CheapState()
    for s in trace.steps if n_steps is None else trace.steps[:n_steps]:
        st.add(s)
    return st.view()


def length_row(messages: int, chars: int) -> np.ndarray:
    """The length fit's features of a run."""
    return np.array([math.log1p(messages), math.log1p(chars)])


def analyze(text: str) -> list[str]:
    """scikit-learn's word analyzer of ``TfidfVectorizer(ngram_range=(1, 2))`` with its defaults."""
    tokens = SKLEARN_TOKEN.findall(text.lower())
    return tokens + [f"{a} {b}" for a, b in zip(tokens, tokens[1:], strict=False)]


def _logistic(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


class CheapModel:
    """A fitted cheap learner, servable with numpy (see the module docstring).

    ``params``: ``tfidf``: ``vocabulary`` (term → column), ``idf``, ``coef``, ``intercept``;
    ``length``: ``coef`` (2), ``intercept``.
    """

    def __init__(self, learner: str, params: dict[str, Any], *, at_risk_threshold: float | None = None,
                 card: dict[str, Any] | None = None) -> None:
        if learner not in LEARNERS:
            raise InputError(f"a cheap learner is one of {', '.join(LEARNERS)}; got {learner!r}", path="learner")
        self.learner: str = learner
        self.params = params
        self.at_risk_threshold = at_risk_threshold
        self.card_: dict[str, Any] = dict(card or {})
        self._coef = np.asarray(params["coef"], float)
        self._b = float(params["intercept"])
        if learner == "tfidf":
            self._vocab: dict[str, int] = {str(k): int(v) for k, v in params["vocabulary"].items()}
            self._idf = np.asarray(params["idf"], float)
            if not len(self._idf) == len(self._coef) == len(self._vocab):
                raise InputError(f"vocabulary, idf and coefficients differ in length ({len(self._vocab)}, "
                                 f"{len(self._idf)}, {len(self._coef)})", path="params")
        elif len(self._coef) != 2:
            raise InputError(f"the length fit has 2 coefficients; got {len(self._coef)}", path="params.coef")
        self._version: str | None = None

    # ---- score ----------------------------------------------------------------------------------

    def start(self) -> CheapState:
        """An empty state for a run that is starting."""
        return CheapState()

    def score_state(self, state: CheapState, *, prior: float | None = None) -> float:
        """P(failed) of the prefix the state has seen (``prior``: unused, the cheap learners take none)."""
        return self.score_view(state.view())

    def score_view(self, view: tuple[str, int, int]) -> float:
        """P(failed) of a run's view (:func:`cheap_view`: text, messages, characters)."""
        text, messages, chars = view
        if self.learner == "length":
            return _logistic(float(length_row(messages, chars) @ self._coef) + self._b)
        return _logistic(self.decision(text))

    def decision(self, text: str) -> float:
        """The TF-IDF logistic regression's decision value of a view text."""
        counts = Counter(j for t in analyze(text) if (j := self._vocab.get(t)) is not None)
        if not counts:
            return self._b
        cols = np.fromiter(counts.keys(), int, len(counts))
        x = (1.0 + np.log(np.fromiter(counts.values(), float, len(counts)))) * self._idf[cols]
        norm = float(np.sqrt(x @ x))
        return float((x / norm) @ self._coef[cols]) + self._b

    def score(self, trace: Trace, *, prior: float | None = None) -> float:
        """P(failed) of a whole run."""
        st = self.start()
        for s in trace.steps:
            st.add(s)
        return self.score_state(st, prior=prior)

    # ---- card, persistence ------------------------------------------------------------------------

    @property
    def card(self) -> dict[str, Any]:
        return {**self.card_, "learner": self.learner, "at_risk_threshold": self.at_risk_threshold,
                "version": self.version}

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "learner": self.learner, "params": self.params,
                "at_risk_threshold": self.at_risk_threshold, "card": self.card_}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CheapModel:
        if d.get("format") != FORMAT:
            raise InputError(f"not a cheap model: format {d.get('format')!r}, expected {FORMAT!r}", path="format")
        thr = d.get("at_risk_threshold")
        return cls(str(d.get("learner")), dict(d["params"]), at_risk_threshold=None if thr is None else float(thr),
                   card=dict(d.get("card") or {}))

    @property
    def version(self) -> str:
        """Content hash of the learned parameters (not of the card)."""
        if self._version is None:
            d = self.to_dict()
            d.pop("card", None)
            self._version = "cm-" + hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]
        return self._version


__all__ = ["FORMAT", "LEARNERS", "CheapModel", "CheapState", "Learner", "analyze", "cheap_view", "length_row"]

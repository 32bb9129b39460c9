"""The redactor's fast paths give what the plain walk gives: :meth:`Redactor.redact` (inline dispatch,
remembered key facts), :meth:`Redactor.redact_steps` (a clean step judged from its fields, no dump)
and the key needles' pre-check (a trie, RE2 on long texts). Each is compared with a reference
written as the code was before (the recursive walk; dump, redact, compare) on generated values that
mix the secret corpus, look-alikes, sensitive keys, non-string keys, tuples, enums and timestamps."""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime, timedelta, timezone
from enum import StrEnum
from typing import Any

import pytest

from model.core.schema import Step, StepKind, StepStatus
from serve.redaction import Redactor
from serve.redaction._patterns import NUMERIC_SECRET_KEY, SENSITIVE_KEY, WORDS
from serve.redaction._redactor import _is_token
from serve.redaction._scan import _KEY_NEEDLES, any_key_needle, any_word
from tests.secret_corpus import LOOKALIKES, SECRETS


def reference_redact(r: Redactor, value: Any, key: str | None = None) -> Any:
    """The walk as it was: recursive, ``isinstance`` dispatch, every key redacted and tested."""
    if not r.rules:
        return value
    if key is not None and "api_key" in r.rules and SENSITIVE_KEY.search(key) is not None:
        if isinstance(value, str) and value:
            return value if _is_token(value) else r._token("api_key", value)
        if isinstance(value, int | float) and not isinstance(value, bool) and NUMERIC_SECRET_KEY.search(key):
            return r._token("api_key", str(value))
    if isinstance(value, str):
        return r.redact_text(value)
    if isinstance(value, dict):
        return {r.redact_text(str(k)): reference_redact(r, v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [reference_redact(r, v) for v in value]
    return value


def reference_steps(r: Redactor, steps: list[Step]) -> list[Step]:
    out = []
    for s in steps:
        data = s.model_dump(mode="json", exclude_none=True)
        clean = reference_redact(r, data)
        out.append(s if clean == data else Step.model_validate(clean))
    return out


class Colour(StrEnum):
    RED = "red"
    KEY = "sk-proj-AAAAbbbbCCCCddddEEEEffff0000"


TEXTS = [text for text, _ in SECRETS.values()] + list(LOOKALIKES) + [
    "", "ok", "short", "plain words with nothing in them", "heat pumps figure 709", "x" * 300,
    "bob@example.com", "[REDACTED:api_key]", "[api_key:0123456789ab]", "through the high gate", "\ud800 lone",
]
KEYS = ["name", "query", "password", "api_key", "token", "pin", "secret", "authorization", "cookie", "city",
        "Password", "client_secret", "bob@example.com", "sk-proj-AAAAbbbbCCCCddddEEEEffff0000", "x", "notes"]


def random_value(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.random()
    if depth > 3 or pick < 0.45:
        return rng.choice([*TEXTS, *TEXTS, 0, 1234, -5, 3.5, 1e300, True, False, None, Colour.RED, Colour.KEY])
    if pick < 0.75:
        out: dict[Any, Any] = {}
        for _ in range(rng.randint(0, 5)):
            k = rng.choice([*KEYS, *KEYS, 7, True, Colour.KEY])
            out[k] = random_value(rng, depth + 1)
        return out
    items = [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return tuple(items) if rng.random() < 0.3 else items


@pytest.mark.parametrize("rules", [None, ["email", "card"], ["api_key"], ["bearer", "ssn", "url_password"]])
@pytest.mark.parametrize("mode", ["mask", "hash"])
def test_redact_equals_the_plain_walk(rules: list[str] | None, mode: str) -> None:
    rng = random.Random(35)
    r = Redactor(mode=mode, salt="s") if rules is None else Redactor.from_names(rules, mode=mode, salt="s")  # type: ignore[arg-type]
    for _ in range(3000):
        value = random_value(rng)
        key = rng.choice([None, *KEYS])
        got = outcome(r.redact, value, _key=key)
        want = outcome(reference_redact, r, value, key)
        assert got == want and type(got) is type(want), (value, key)
        # the second time answers from the remembered keys and clean texts: the same
        assert outcome(r.redact, value, _key=key) == want


def outcome(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn``'s answer, or the type of its error (hash mode cannot hash a lone surrogate: before too)."""
    try:
        return fn(*args, **kwargs)
    except UnicodeEncodeError as exc:
        return type(exc)


def random_step(rng: random.Random) -> Step:
    def text() -> str:
        return rng.choice(TEXTS)

    fields: dict[str, Any] = {"kind": rng.choice(list(StepKind)), "content": text(),
                              "source_index": rng.randint(0, 9)}
    if rng.random() < 0.5:
        fields["tool_args"] = {rng.choice(KEYS): rng.choice([text(), 42, {"inner": text()}, [text()]])
                               for _ in range(rng.randint(0, 3))}
    if rng.random() < 0.5:
        zone = rng.choice([UTC, timezone(timedelta(hours=-5)), None])
        fields["timestamp"] = datetime(2026, 1, 1, 20, 3, 12, rng.choice([0, 5000]), tzinfo=zone)
    if rng.random() < 0.5:
        fields["metadata"] = {rng.choice(KEYS): rng.choice([text(), 7, None, [1, None]])}
    for name in ("speaker", "tool_name", "tool_args_raw", "call_id", "error_type", "model", "span_id"):
        if rng.random() < 0.3:
            fields[name] = text()
    if rng.random() < 0.3:
        fields["status"] = rng.choice(list(StepStatus))
    if rng.random() < 0.3:
        fields.update(latency_ms=12.5, tokens_in=3, tokens_out=4, temperature=0.2)
    return Step(**fields)


@pytest.mark.parametrize("rules", [None, ["email"], ["card", "ssn"]])
def test_redact_steps_equals_dump_redact_compare(rules: list[str] | None) -> None:
    rng = random.Random(7)
    r = Redactor() if rules is None else Redactor.from_names(rules)
    steps = [random_step(rng) for _ in range(1500)]
    got = r.redact_steps(steps)
    want = reference_steps(Redactor() if rules is None else Redactor.from_names(rules), steps)
    assert len(got) == len(want)
    for s, g, w in zip(steps, got, want, strict=True):
        assert g.model_dump(mode="json") == w.model_dump(mode="json")
        assert (g is s) == (w is s)  # a step with nothing to redact is returned as it is, as before


def test_a_clean_step_is_judged_without_a_dump() -> None:
    step = Step(kind=StepKind.TOOL_CALL, content="", tool_name="search", tool_args={"query": "heat pumps"},
                timestamp=datetime(2026, 1, 1, tzinfo=UTC))
    r = Redactor()

    def unchanged(s: Step) -> bool:  # judged from its fields: its texts, asked in one scan
        texts = r._step_texts(s)
        return texts is not None and r._all_clean(texts)

    assert unchanged(step)
    assert r.redact_steps([step])[0] is step
    secret = Step(kind=StepKind.TOOL_CALL, tool_args={"password": "hunter22"})
    assert not unchanged(secret)
    assert r.redact_steps([secret])[0].tool_args == {"password": "[REDACTED:api_key]"}


def test_key_needles_and_words_prechecks_equal_the_flat_alternations() -> None:
    flat = re.compile("|".join(sorted({re.escape(n) for n in _KEY_NEEDLES}, key=len, reverse=True)))
    flat_words = re.compile(b"|".join(re.escape(w) for w in WORDS))
    rng = random.Random(3)
    alphabet = "abcdefghijklmnopqrstuvwxyzAGKPSIEhk_-./:1029 \ud800é"
    found = 0
    for _ in range(20000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.choice([3, 40, 127, 128, 129, 600])))
        if rng.random() < 0.4:
            needle = rng.choice(_KEY_NEEDLES)
            at = rng.randrange(len(text) + 1)
            text = text[:at] + needle[: rng.randint(1, len(needle))] + text[at:]
        if rng.random() < 0.2:
            word = rng.choice(WORDS).decode()
            at = rng.randrange(len(text) + 1)
            text = text[:at] + word[: rng.randint(1, len(word))] + text[at:]
        want = flat.search(text) is not None
        assert any_key_needle(text) == want, text
        low = text.encode("ascii", "replace").lower()
        assert any_word(low) == (flat_words.search(low) is not None), text
        found += want
    assert 2000 < found < 18000  # both answers were exercised


def test_only_short_clean_keys_are_remembered() -> None:
    """The key memo is bounded like the clean-text memo: no secret, and no key longer than 64 characters."""
    r = Redactor()
    long_key, secret_key = "k" * 65, "sk-proj-AAAAbbbbCCCCddddEEEEffff0000"
    assert r.redact({"city": 1, long_key: 2, secret_key: 3}) == {"city": 1, long_key: 2, "[REDACTED:api_key]": 3}
    assert "city" in r._keys and long_key not in r._keys and secret_key not in r._keys


@pytest.mark.parametrize("rules", [None, ["email"], ["card", "ssn"], ["bearer", "url_password"], ["api_key"]])
def test_one_scan_of_joined_texts_misses_no_secret(rules: list[str] | None) -> None:
    """:meth:`Redactor._all_clean` asks many texts in one scan (joined by newlines): it may send clean
    texts to the exact walk (a match across two of them), never let a text that redaction changes pass.
    Every secret of the corpus is tried as the whole text (its edges at the text's edges, where
    look-behinds and look-aheads meet the newline), inside its sentence, and cut or glued to a word."""
    r = Redactor() if rules is None else Redactor.from_names(rules)
    alone = [secret for _, secret in SECRETS.values()] + [text for text, _ in SECRETS.values()]
    shapes = alone + [s + "x" for s in alone] + ["x" + s for s in alone] + [s[:-3] for s in alone] + TEXTS
    shapes += ["token: abcd", "password=", "hunter22", "Bearer", "abcdefgh", "4111 1111 1111 1111", "4111-1111-1111-1111",
               "123-45-6789", "078-05-1120", "-----BEGIN PRIVATE KEY-----", "user:pw@host", "https://", "a@b.io", "@b.io"]
    plain = ["plain words", "heat pumps figure 709", "2026-01-01T13:02:10.005000Z", "call_4932af3bda", '{"city": "Oslo"}']
    rng = random.Random(11)
    judged_clean = 0
    for _ in range(4000):
        texts = [rng.choice(plain + shapes) for _ in range(rng.randint(1, 5))]
        changed = any(outcome(Redactor.redact_text, r, t) != t for t in texts)
        fresh = Redactor() if rules is None else Redactor.from_names(rules)
        verdict = outcome(fresh._all_clean, [t for t in texts if len(t) >= 6])
        if changed:
            assert verdict is not True, texts
        judged_clean += verdict is True
    assert judged_clean > 200  # the one scan answered for the clean ones
    # a clean trace's steps are judged by that one scan and come back as they are
    steps = [Step(kind=StepKind.TOOL_CALL, tool_name="search", tool_args={"query": f"heat pumps {i}"},
                  timestamp=datetime(2026, 1, 1, 0, 0, i, tzinfo=UTC)) for i in range(10)]
    assert all(a is b for a, b in zip(r.redact_steps(steps), steps, strict=True))
    for secret, _ in list(SECRETS.values())[:5]:
        leaky = [*steps[:4], Step(kind=StepKind.TOOL_RESULT, content=secret), *steps[4:]]
        assert r.redact_steps(leaky)[4].content == r.redact_text(secret)


def reference_trace(r: Redactor, trace: Any) -> Any:
    """:meth:`Redactor.redact_trace` as it was: everything but the steps dumped, redacted, validated again."""
    from model.core.schema import Trace

    data = trace.model_dump(mode="json", exclude={"steps", "id", "session_id"})
    out = Trace.model_validate({**reference_redact(r, data), "id": trace.id, "session_id": trace.session_id})
    out.steps = reference_steps(r, trace.steps)
    return out


@pytest.mark.parametrize("rules", [None, ["email"], ["api_key"]])
def test_redact_trace_equals_dump_redact_validate(rules: list[str] | None) -> None:
    """A trace whose tools, metadata, task type and language hold nothing to redact is copied with its
    redacted steps (no dump, no validation); any other is redacted as before. Both give what the dump gave."""
    from model.core.schema import ToolDefinition, Trace, TraceLabels

    rng = random.Random(5)
    r = Redactor() if rules is None else Redactor.from_names(rules)
    copied = 0
    for i in range(600):
        tools = [ToolDefinition(name=rng.choice(["search", "get_weather", *TEXTS[:3]]),
                                description=rng.choice(["Web search", "", rng.choice(TEXTS)]),
                                parameters=rng.choice([None, {"type": "object", "properties": {rng.choice(KEYS): {"type": "string"}}},
                                                       {"default": rng.choice(TEXTS)}]))
                 for _ in range(rng.randint(0, 3))]
        trace = Trace(id=f"t{i}", session_id=rng.choice([None, "s1"]), task_type=rng.choice([None, "demo", rng.choice(TEXTS)]),
                      language=rng.choice([None, "en"]), steps=[random_step(rng) for _ in range(rng.randint(0, 3))],
                      tools=tools if rng.random() < 0.7 else [],
                      metadata=rng.choice([{}, {"service.name": "agent"}, {rng.choice(KEYS): rng.choice(TEXTS)}]),
                      labels=TraceLabels(failed=True) if rng.random() < 0.1 else None)
        got = outcome(r.redact_trace, trace)
        want = outcome(reference_trace, Redactor() if rules is None else Redactor.from_names(rules), trace)
        if isinstance(want, type):
            assert got is want
            continue
        assert got.model_dump(mode="json") == want.model_dump(mode="json")
        copied += got.tools is trace.tools
    assert copied > 50  # the copy was taken


def test_texts_past_one_scan_are_asked_in_chunks() -> None:
    """More text than one exact scan takes (64 KiB) is asked in chunks, a longer text alone: a secret in
    the last chunk, or in a text longer than a chunk, is still found; clean ones are still judged clean."""
    from serve.redaction._redactor import _LONG

    r = Redactor()
    filler = [f"row {i} of plain words, nothing secret here at all" for i in range(3000)]  # ~150 KB
    assert sum(map(len, filler)) > 2 * _LONG
    assert r._all_clean(list(filler))
    for secret, _ in list(SECRETS.values())[:6]:
        assert not Redactor()._all_clean([*filler, secret])
        assert not Redactor()._all_clean([*filler[:10], "x " * _LONG + secret, *filler[:10]])
    big = {"findings": [{"evidence": text, "step": i} for i, text in enumerate(filler)]}
    assert r.redact(big) == big
    leaky = {"findings": [*big["findings"], {"evidence": "key sk-proj-AAAAbbbbCCCCddddEEEEffff0000"}]}
    assert r.redact(leaky)["findings"][-1]["evidence"] == "key [REDACTED:api_key]"

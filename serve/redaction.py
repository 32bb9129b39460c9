"""Redaction of secrets and personal data, in linear time, before anything is stored or answered.

Every trace is redacted *before* it is diagnosed (so evidence, which the detectors cut to a few
hundred characters, is cut from redacted text and never ends in a key's prefix), and what is
stored or answered — the trace, the diagnosis, the recommendation, the repair-policy state,
outcome notes — passes through a :class:`Redactor`.

Rules (each can be switched off by name, setting ``TRIAGE_REDACT``):

``api_key``
    Well-known key shapes (OpenAI / Anthropic ``sk-…``, Stripe ``sk_live_`` / ``rk_live_`` /
    ``whsec_``, AWS ``AKIA…`` ids and bare 40-character secret keys, GitHub ``ghp_…`` /
    ``github_pat_…``, GitLab ``glpat-…``, Slack ``xox?-…`` tokens and webhook URLs, Google
    ``AIza…`` / ``ya29.…``, SendGrid, npm, PyPI, Hugging Face, Shopify, DigitalOcean, Vault, …,
    our own ``trg_…``), JSON Web Tokens, PEM private keys, and the value of ``password=…`` /
    ``"client_secret": "…"``-like assignments in text. A JSON value stored under a sensitive key
    (``password``, ``private_key``, ``aws_secret_access_key``, ``authorization``, ``cookie`` …) is
    replaced whole.
``bearer``
    ``Bearer <token>``, ``Basic <base64 user:password>`` and ``Cookie:`` / ``Set-Cookie:`` headers.
``url_password``
    ``scheme://user:PASSWORD@host``.
``email``
    E-mail addresses.
``card``
    Payment-card numbers (a card network's prefix and length, Luhn check digit).
``ssn``
    US social security numbers (``123-45-6789``, the ranges the SSA issues).

Look-alikes survive: UUIDs, hex digests, order and version numbers fail every shape above.

Linear time: every pattern can only start where its anchor starts (a literal prefix, or a
look-behind that forbids starting inside a run of the characters it consumes), every repetition
after an anchor is possessive or bounded, and no repetition may run across the next anchor. So no
input makes the regex engine backtrack: a string of *n* characters costs O(n) per rule
(``bench/redaction.py`` measures adversarial inputs up to the 5 MiB body limit).

Two paths, one result. A text of at most 64 KiB (``_LONG``: nearly every string of a trace) takes
the exact path: each pattern's matches, the checks after a match in Python, a merge of tuples. A
longer one takes the bulk path, built so that the engine's C loop does the work per match and
numpy the rest: which rules to run comes from one pass of an RE2 set over the literal anchors;
each pattern's matches come out of one ``split`` as the lengths of its pieces (no match object,
no span tuple; a header's or an assignment's value start is then found in numpy); an e-mail's
local part, a card's network and Luhn digit, an SSN's ranges and an AWS key's mixed case are
checked in numpy over all candidates at once; spans are merged in numpy (same groups, same
labels); a mask-mode text with more than 2,000 secrets is rebuilt in numpy. ``tests/test_redaction.py`` checks that
both paths give the same text on seeded mixed texts (the corpus, the look-alikes, edge cases of
every rule, in three cases, both modes, rules switched off) and on every adversarial and dense
shape (ASCII and not).

Floods (the one place the paths differ): a text holding more than 4,096 ``basic`` anchors (any
case), one per 256 characters or denser, is a flood of ``Basic`` candidates; its values are
masked by a coarse numpy pass, every base64 run after ``basic`` and 1–8 blanks, without decoding
each to see whether it is ``user:password``. Every credential the exact check finds is such a
run (the same span), so none survives; what the flood loses is its look-alikes: ``Basic setup``
or ``Basic dXNlcj`` (no colon) are masked too. Texts below that density (ordinary text) get the
exact check. No other rule has a coarse pass: a flood of card-shaped numbers, e-mail-like
versions (``pkg@1.2.3``) or order numbers is ordinary text (a CSV, a lockfile), so every card
candidate gets its Luhn and network check, every domain the full pattern.

Speed (``.venv/bin/python bench/redaction.py --dense --clock cpu``, 5 MiB, CPU ms, the shared
2-core machine at load 4, 2026-12-01 15:10 UTC; before → after this path): prose 25 → 29, JSON-like
32 → 27; near-miss shapes 24–73 → 7–49; ``'Basic dXNlcj '*n`` 302 → 64 (the coarse pass),
``'password="'*n`` 257 → 87, ``'4111 '*n`` 387 → 79; back-to-back JWTs 105 → 43; dense e-mails,
keys, cards 365 → 89, 136 → 62, 509 → 98. Every shape at every size ≤ 100 ms; the floods are close
to it (81–98 ms in five runs, once 100.6). Hash mode computes one HMAC per distinct secret in
Python: its dense floods cost 124–212 ms (``--mode hash``); a mask-mode flood that is not ASCII
is rebuilt from UTF-32 (dense e-mails 103 ms). ``docs/benchmarks.md`` has the table.

Two modes: ``mask`` replaces a match with ``[REDACTED:<rule>]``; ``hash`` replaces it with
``[<rule>:<12 hex of HMAC-SHA256(salt, match)>]``, so equal secrets stay equal (joins and loop
detection still work on stored text) without the secret being recoverable.

>>> r = Redactor()
>>> r.redact_text("mail bob@example.com, key sk-abcdefghijklmnopqrstuvwx")
'mail [REDACTED:email], key [REDACTED:api_key]'
>>> Redactor(mode="hash", salt="s").redact_text("bob@example.com")
'[email:2e2bb26f16c4]'
"""

from __future__ import annotations

import base64
import binascii
import bisect
import functools
import hashlib
import hmac
import itertools
import operator
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import re2

from model.core.schema import Step, Trace

RedactionMode = Literal["mask", "hash"]

RULES: tuple[str, ...] = ("api_key", "bearer", "url_password", "email", "card", "ssn")

# Key shapes, grouped by a literal prefix. The prefix is the anchor: the engine jumps from one
# occurrence to the next (a short text is first asked whether it holds one of the needles at all).
# Each group costs one scan of the text (≈ 1.3 ms at 5 MiB) plus one attempt per occurrence of its
# prefix (≈ 10 ns each): a one-letter prefix of a common letter ("p", "x", "h") made a flood of
# that letter cost ≈ 40 ms more at 5 MiB, so those groups are split into their full prefixes.
# The bodies are the issuers' alphabets, possessive, and end the match, so a failed attempt costs
# at most the body's minimum length. (prefix, needles, what follows the prefix)
_KEY_SHAPES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "sk",
        ("sk-", "sk_"),
        r"(?:-(?:ant-(?:api|admin)\d\d-|ant-|proj-|svcacct-|admin-|live-|test-)?[A-Za-z0-9_\-]{16,}+"
        r"|_(?:live|test)_[A-Za-z0-9]{10,}+)",
    ),
    ("rk_", ("rk_",), r"(?:live|test)_[A-Za-z0-9]{10,}+"),
    ("whsec_", ("whsec_",), r"[A-Za-z0-9+/=]{20,}+"),
    (
        "A",
        ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "AIPA", "AIza", "AGE-", "ATATT"),
        r"(?:(?:KIA|SIA|GPA|IDA|ROA|NPA|IPA)[0-9A-Z]{16}(?![0-9A-Za-z])|Iza[0-9A-Za-z_\-]{35}"
        r"|GE-SECRET-KEY-1[0-9A-Z]{50,}+|TATT3[A-Za-z0-9_=\-]{20,}+)",
    ),
    ("gh", ("gh",), r"[pousr]_[A-Za-z0-9]{30,}+"),
    ("github_pat_", ("github_pat_",), r"[A-Za-z0-9_]{40,}+"),
    ("gl", ("gl",), r"(?:pat|dt|rt|ptt)-[A-Za-z0-9_\-]{20,}+"),
    ("xox", ("xox",), r"[abprse]-[A-Za-z0-9\-]{10,}+"),
    ("xapp-", ("xapp-",), r"[A-Za-z0-9\-]{10,}+"),
    ("xai-", ("xai-",), r"[A-Za-z0-9]{30,}+"),
    ("ya29.", ("ya29.",), r"[0-9A-Za-z_\-]{20,}+"),
    ("1//0", ("1//0",), r"[0-9A-Za-z_\-]{30,}+"),
    ("trg_", ("trg_",), r"[A-Za-z0-9]{8}_[A-Za-z0-9_\-]{20,}+"),
    ("S", ("SG.", "SK"), r"(?:G\.[A-Za-z0-9_\-]{16,}+\.[A-Za-z0-9_\-]{16,}+|K[0-9a-f]{32}(?![0-9A-Za-z]))"),
    ("npm_", ("npm_",), r"[A-Za-z0-9]{36}"),
    ("pypi-", ("pypi-",), r"[A-Za-z0-9_\-]{50,}+"),
    ("pplx-", ("pplx-",), r"[A-Za-z0-9]{30,}+"),
    ("hf_", ("hf_",), r"[A-Za-z0-9]{30,}+"),
    ("hv", ("hvs.", "hvb."), r"[sb]\.[A-Za-z0-9_\-]{20,}+"),
    ("key-", ("key-",), r"[0-9a-zA-Z]{32}(?![0-9A-Za-z])"),
    ("shp", ("shp",), r"(?:at|ss|ca|pa)_[a-fA-F0-9]{32}"),
    ("do", ("_v1_",), r"[opr]_v1_[a-f0-9]{64}"),
    ("lin_api_", ("lin_api_",), r"[A-Za-z0-9]{32,}+"),
    ("secret_", ("secret_",), r"[A-Za-z0-9]{43}(?![0-9A-Za-z])"),
    ("PMAK-", ("PMAK-",), r"[A-Za-z0-9\-]{30,}+"),
    ("sbp_", ("sbp_",), r"[a-f0-9]{40}"),
    ("dapi", ("dapi",), r"[a-f0-9]{32}"),
    ("gsk_", ("gsk_",), r"[A-Za-z0-9]{30,}+"),
    ("r8_", ("r8_",), r"[A-Za-z0-9]{30,}+"),
    ("sq0", ("sq0",), r"(?:atp|csp)-[A-Za-z0-9_\-]{20,}+"),
    ("EAA", ("EAA",), r"[A-Za-z0-9]{80,}+"),
    # JSON Web Tokens: base64url header and payload (both JSON, so both start "eyJ"), signature.
    ("eyJ", ("eyJ",), r"[A-Za-z0-9_\-]{5,}+\.eyJ[A-Za-z0-9_\-]{5,}+\.[A-Za-z0-9_\-]*+"),
    # Webhook URLs carry their secret in the path.
    ("hooks.slack.com/", ("hooks.slack",), r"(?:services|workflows|triggers)/[A-Za-z0-9/_\-]{8,}+"),
    ("discord", ("/webhooks/",), r"(?:app)?\.com/api/webhooks/[0-9]{5,}+/[A-Za-z0-9_\-]{20,}+"),
    # Telegram bot tokens "123456789:AA…": the id before the colon is public, the rest is not.
    (":AA", (":AA",), r"(?<=[0-9]{8}:AA)[0-9A-Za-z_\-]{30,}+"),
)


def _anchored(prefix: str, rest: str) -> re.Pattern[str]:
    """``prefix`` + ``rest``, not where the prefix continues a longer word."""
    guard = f"(?<![A-Za-z0-9_]{re.escape(prefix)})" if prefix[0].isalnum() else ""
    return re.compile(re.escape(prefix) + guard + rest)


_KEYS: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = tuple(
    (needles, _anchored(p, rest)) for p, needles, rest in _KEY_SHAPES
)
_PEM = re.compile(
    r"-----BEGIN (?:(?!PRIVATE )[A-Z0-9]++ ){0,3}+PRIVATE KEY-----(?:[^\-]|-(?!----))*+"
    r"(?:-----END (?:(?!PRIVATE )[A-Z0-9]++ ){0,3}+PRIVATE KEY-----)?"
)
_URL_PASSWORD = re.compile(r"://[^\s:/?#@]++:([^\s@/?#]++)@")
# At most 16 labels of at most 63 characters: a failed domain costs a bounded number of steps.
_EMAIL_DOMAIN = re.compile(r"@(?:[A-Za-z0-9\-]{1,63}+\.){1,16}[A-Za-z]{2,63}+(?![A-Za-z0-9\-])")
_EMAIL_LOCAL_REVERSED = re.compile(r"[A-Za-z0-9._%+\-]{0,64}")

# On the lower-cased ASCII view (case-insensitive words without the slow IGNORECASE scan).
_SECRET_WORDS: tuple[tuple[str, str], ...] = (
    ("pass", r"(?:word|wd|phrase)"),
    ("secret", r"(?:[_\-]?(?:access[_\-]?)?key)?"),
    ("token", ""),
    ("api", r"[_\-]?(?:key|token)"),
    ("key", "(?:" + "|".join(f"(?<={w}[_\\-]key)|(?<={w}key)" for w in ("access", "account", "private")) + ")"),
    ("credential", r"s?"),
    ("connection", r"[_\-]?string"),
)
_VALUE = (
    r"[\"']?[ \t]{0,8}+[:=][ \t]{0,8}+"
    # a quoted value up to its closing quote (or the end: raw arguments may be cut), else a bare
    # value of 4+ characters that is not one of our own tokens
    r"(?!\"?'?\[(?:redacted:|[a-z_]+:[0-9a-f]{12}\]))"
    r"(?:\"((?:[^\"\\\r\n]|\\.){1,4096}+)|'([^'\r\n]{1,4096}+)|([^\s\"',;&}\])]{4,}+))"
)
_ASSIGN: tuple[tuple[bytes, re.Pattern[bytes]], ...] = tuple(
    (w.encode(), re.compile((re.escape(w) + suffix + _VALUE).encode())) for w, suffix in _SECRET_WORDS
)
# _VALUE cut in two for the bulk path (below): what comes before the value (its opening quote
# too) and the value. The value's first character decides the alternative as in _VALUE: a value
# after a quote is the quoted one (the character before the value is a quote only then).
_VALUE_HEAD = r"[\"']?[ \t]{0,8}+[:=][ \t]{0,8}+(?!\"?'?\[(?:redacted:|[a-z_]+:[0-9a-f]{12}\]))(?:\"|'|)"
# A quoted value with no backslash is one run of a character class (fast: one step per run, not one
# alternation per character); one with a backslash among its first 4096 characters is the
# original (the run stops there, the look-ahead fails, the next alternative gives _VALUE's value).
_VALUE_BODY = (
    r"(?:(?<=\")[^\"\\\r\n]{1,4096}+(?!\\)|(?<=\")(?:[^\"\\\r\n]|\\.){1,4096}+"
    r"|(?<=')[^'\r\n]{1,4096}+|[^\s\"',;&}\])]{4,}+)"
)
_SENSITIVE_KEY = re.compile(
    r"(?i)(?:password|passwd|passphrase|secret|token|api[_\-]?key|access[_\-]?key|account[_\-]?key|"
    r"private[_\-]?key|credentials?|connection[_\-]?string|authorization|cookie)"
    r"(?:[_\-]?(?:key|value|string|hash|b64|base64))?$"
)
_NUMERIC_SECRET_KEY = re.compile(r"(?i)(?:password|passwd|passphrase|secret|pin)$")
_BEARER = re.compile(rb"bearer(?<![a-z]bearer)[ \t]{1,8}+([a-z0-9\-._~+/]{8,}+=*+)")
_BASIC = re.compile(rb"basic(?<![a-z]basic)[ \t]{1,8}+([a-z0-9+/]{4,}+={0,2}+)(?![a-z0-9+/=])")
_COOKIE = re.compile(rb"cookie(?<![a-z]cookie)[ \t]{0,8}+:[ \t]{0,8}+([^\s=;\":]{1,256}+=[^\r\n\"]*+)")


def _table(mapping: dict[bytes, bytes], other: bytes) -> bytes:
    out = bytearray(other * 256)
    for chars, to in mapping.items():
        for c in chars:
            out[c] = to[0]
    return bytes(out)


# Translated views, where a shape becomes a literal the engine finds fast: every base64 character
# → "a", else "." (AWS secrets); digits → "0", space → "s", dash → "m", else "." (cards, SSNs).
_B64_VIEW = _table({b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=": b"a"}, b".")
_AWS_RUN = re.compile(rb"\." + b"a" * 40 + rb"(?=\.)")
_AWS_MIXED = re.compile(r"(?=[^A-Z]*[A-Z])(?=[^a-z]*[a-z])(?=[^0-9]*[0-9])")
_DIGIT_VIEW = _table({b"0123456789": b"0", b" ": b"s", b"-": b"m"}, b".")
_CARD = re.compile(
    rb"0000(?<![0m]0000)(?:0{9,15}|[sm]0000[sm]0000[sm]0000(?:[sm]000)?|[sm]000000[sm]0000(?:0)?)(?!0)"
)
_SSN = re.compile(rb"000m00m0000(?<![0m]000m00m0000)(?![0m])")


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card_network(digits: str) -> bool:
    """Whether ``digits`` has a card network's prefix and one of its lengths."""
    n = len(digits)
    if digits[0] == "4":
        return n in (13, 16, 19)  # Visa
    two, four = int(digits[:2]), int(digits[:4])
    if 51 <= two <= 55 or 2221 <= four <= 2720:
        return n == 16  # Mastercard
    if two in (34, 37):
        return n == 15  # American Express
    if digits.startswith(("6011", "65")) or 644 <= int(digits[:3]) <= 649:
        return 16 <= n <= 19  # Discover
    if 3528 <= four <= 3589:
        return 16 <= n <= 19  # JCB
    if two in (36, 38, 39) or 300 <= int(digits[:3]) <= 305:
        return 14 <= n <= 19  # Diners
    if digits.startswith(("62", "81")):
        return 16 <= n <= 19  # UnionPay
    return False


def _basic_credentials(token: str) -> bool:
    """Whether ``token`` is base64 of ``user:password`` (the Basic scheme), not an ordinary word."""
    try:
        raw = base64.b64decode(token + "=" * (-len(token) % 4), validate=True)
        text = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return False
    return ":" in text and text.isprintable()


Span = tuple[int, int, str]  # start, end, rule label

#: The words searched in the lower-cased view.
_WORDS: tuple[bytes, ...] = (b"bearer", b"basic", b"cookie", *(w for w, _ in _ASSIGN))

#: Longer texts are asked which anchors they hold in one pass of RE2's DFA (below); shorter ones
#: by a substring test per anchor (cheap there, and no per-call overhead). Longer texts take the
#: bulk path too (below: no Python work per match).
_LONG = 65536


@functools.cache
def _anchor_set() -> tuple[Any, tuple[str, ...]]:
    """An RE2 set of every rule's literal anchors and the name of each: ``key<i>`` (``_KEYS[i]``),
    ``pem``, ``url``, ``email``, ``digit``, and the words searched in the lower-cased view
    (case-insensitive: a superset of what the view holds). Literals and single character classes
    only, so the DFA has a few hundred states and cannot run out of memory (RE2's set would then
    say "no match")."""
    names: list[str] = []
    anchors = re2.Set.SearchSet(re2.Options())

    def add(pattern: str, name: str) -> None:
        anchors.Add(pattern)
        names.append(name)

    for i, (needles, _) in enumerate(_KEYS):
        for needle in needles:
            add(re.escape(needle), f"key{i}")
    add(re.escape("PRIVATE KEY-----"), "pem")
    add(re.escape("://"), "url")
    add(r"@[A-Za-z0-9\-]", "email")  # what the domain pattern needs after the "@"
    add("[0-9]", "digit")  # what cards, SSNs and AWS secrets need (the bulk path asks)
    for word in _WORDS:
        add("(?i)" + re.escape(word.decode()), word.decode())
    anchors.Compile()
    return anchors, tuple(names)


#: The words of the lower-cased view in one alternation (a short text without any skips them all).
_ANY_WORD = re.compile(b"|".join(re.escape(w) for w in _WORDS))

#: Every key group's literal prefixes in one alternation: only ever used to say "none is here"
#: (a match sends the text to the per-group tests, so overlapping needles cannot hide one).
_ANY_KEY_NEEDLE = re.compile("|".join(sorted({re.escape(n) for needles, _ in _KEYS for n in needles},
                                              key=len, reverse=True)))


class _Anchors:
    """Which anchors ``text`` holds: one RE2 pass for a long text, substring tests for a short one."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.found: frozenset[str] | None = None
        # a short text: one C-level scan says whether any key prefix is there at all (most texts —
        # JSON keys, ids, ordinary words — hold none; then no key group is asked one by one)
        self.no_key = len(text) <= _LONG and _ANY_KEY_NEEDLE.search(text) is None
        if len(text) > _LONG:
            anchors, names = _anchor_set()
            try:
                self.found = frozenset(names[i] for i in anchors.Match(text) or ())
            except UnicodeEncodeError:  # a lone surrogate: no UTF-8 for RE2; test each anchor
                self.found = None

    def any_word(self, words: Iterable[bytes], low: bytes) -> bool:
        """Whether the lower-cased view ``low`` may hold one of ``words`` (:data:`_WORDS`; a short
        text is asked by one scan of ``low``)."""
        if self.found is None:
            return _ANY_WORD.search(low) is not None
        return any(w.decode() in self.found for w in words)

    def key(self, i: int, needles: tuple[str, ...]) -> bool:
        if self.found is not None:
            return f"key{i}" in self.found
        return not self.no_key and any(n in self.text for n in needles)

    def has(self, name: str, needle: str) -> bool:
        return name in self.found if self.found is not None else needle in self.text

    def word(self, word: bytes, low: bytes) -> bool:
        return word.decode() in self.found if self.found is not None else word in low

    def digit(self) -> bool:
        """Whether the text may hold an ASCII digit (always, without the RE2 pass)."""
        return self.found is None or "digit" in self.found


def _find_spans(text: str, rules: frozenset[str]) -> list[Span]:
    """Where the secrets in ``text`` are: ``(start, end, label)``, unordered, maybe overlapping."""
    spans: list[Span] = []
    add = spans.append
    has = _Anchors(text)
    api, bearer = "api_key" in rules, "bearer" in rules
    if api:
        if has.has("pem", "PRIVATE KEY-----"):
            spans += [(*m.span(), "private_key") for m in _PEM.finditer(text)]
        if not has.no_key:
            for i, (needles, pattern) in enumerate(_KEYS):
                if has.key(i, needles):
                    spans += [(*m.span(), "api_key") for m in pattern.finditer(text)]
    if "url_password" in rules and has.has("url", "://"):
        spans += [(*m.span(1), "password") for m in _URL_PASSWORD.finditer(text)]
    if "email" in rules and has.has("email", "@"):
        for m in _EMAIL_DOMAIN.finditer(text):
            at = m.start()
            local = _EMAIL_LOCAL_REVERSED.match(text[max(0, at - 64) : at][::-1])
            n = local.end() if local is not None else 0
            if n:  # "@app.route" is a decorator, not an address
                add((at - n, m.end(), "email"))
    if not (api or bearer or "card" in rules or "ssn" in rules):
        return spans
    # One ASCII view, index for index (a non-ASCII character becomes "?"), lower-cased.
    raw = text.encode("ascii", "replace")
    low = raw.lower() if api or bearer else b""
    if (api or bearer) and has.any_word(_WORDS, low):
        if bearer:
            if has.word(b"bearer", low):
                spans += [(*mb.span(1), "bearer") for mb in _BEARER.finditer(low)]
            if has.word(b"basic", low):
                for mb in _BASIC.finditer(low):
                    if _basic_credentials(text[mb.start(1) : mb.end(1)]):
                        add((mb.start(1), mb.end(1), "basic_auth"))
            if has.word(b"cookie", low):
                spans += [(*mb.span(1), "cookie") for mb in _COOKIE.finditer(low)]
        if api:
            for word, bpattern in _ASSIGN:
                if has.word(word, low):
                    # the value is the one group of the three that took part; our own tokens
                    # are refused by _VALUE's look-ahead
                    spans += [(*mb.span(mb.lastindex or 0), "api_key") for mb in bpattern.finditer(low)]
    if api:
        view = (b"." + raw + b".").translate(_B64_VIEW)
        for mb in _AWS_RUN.finditer(view):
            start = mb.start()  # the view is one character ahead
            if _AWS_MIXED.match(text[start : start + 40]):
                add((start, start + 40, "api_key"))
    if "card" in rules or "ssn" in rules:
        digits = raw.translate(_DIGIT_VIEW)
        if "card" in rules and b"0000" in digits:
            for mb in _CARD.finditer(digits):
                number = text[mb.start() : mb.end()].replace(" ", "").replace("-", "")
                if _card_network(number) and _luhn_ok(number):
                    add((mb.start(), mb.end(), "card"))
        if "ssn" in rules and b"000m00m0000" in digits:
            for mb in _SSN.finditer(digits):
                area, group = text[mb.start() : mb.start() + 3], text[mb.start() + 4 : mb.start() + 6]
                if area not in ("000", "666") and area[0] != "9" and group != "00" and not text.startswith(
                    "0000", mb.start() + 7
                ):
                    add((mb.start(), mb.end(), "ssn"))
    return spans


_FIRST, _SECOND, _THIRD = operator.itemgetter(0), operator.itemgetter(1), operator.itemgetter(2)


def _disjoint(spans: list[Span]) -> bool:
    """Whether sorted ``spans`` do not overlap (neighbours suffice; compared in C by ``map``)."""
    if len(spans) < 2:
        return True
    starts = list(map(_FIRST, spans))
    ends = list(map(_SECOND, spans))
    return all(map(operator.le, ends[:-1], starts[1:]))


#: Which label wins when secrets overlap (the merged span gets one token).
_PRIORITY = {
    label: i
    for i, label in enumerate(
        ("private_key", "bearer", "basic_auth", "cookie", "password", "api_key", "email", "card", "ssn")
    )
}

#: The mask-mode replacement of each label.
_MASK = {label: f"[REDACTED:{label}]" for label in _PRIORITY}


def _merge(spans: list[Span]) -> list[Span]:
    """Sorted, disjoint spans: overlapping secrets are redacted as one (the label of the highest
    priority); an e-mail address that overlaps another secret is dropped (in
    ``scheme://user:password@host`` the "address" is the password and the host)."""
    if not spans:
        return spans
    others = sorted([s for s in spans if s[2] != "email"])
    emails = sorted([s for s in spans if s[2] == "email"])
    if not emails and _disjoint(others):  # the common case, floods included: nothing to merge
        return others
    if not others and _disjoint(emails):
        return emails
    merged: list[Span] = []
    for start, end, label in others:
        if merged and start < merged[-1][1]:
            p_start, p_end, p_label = merged[-1]
            merged[-1] = (p_start, max(p_end, end), label if _PRIORITY[label] < _PRIORITY[p_label] else p_label)
        else:
            merged.append((start, end, label))
    if not emails:
        return merged
    if merged:
        starts = [m[0] for m in merged]
        keep = []
        for e in emails:
            i = bisect.bisect_left(starts, e[1])  # spans starting before the e-mail ends
            if i == 0 or merged[i - 1][1] <= e[0]:
                keep.append(e)
        emails = keep
    out: list[Span] = []
    for start, end, label in sorted(merged + emails):  # e-mails may still overlap each other
        if out and start < out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end), out[-1][2])
        else:
            out.append((start, end, label))
    return out


# --- The bulk path: texts over _LONG characters -------------------------------------------------
#
# Same rules, same spans, but no Python work per match: each pattern's matches come out of one
# ``split`` (C) as the lengths of the pieces, the checks after a match (an e-mail's local part, a
# card's network and Luhn digit, an SSN's ranges, an AWS key's mixed case) run in numpy over all
# candidates at once, spans are merged in numpy, and a mask-mode text is rebuilt in numpy.
# tests/test_redaction.py checks that it gives what the exact path above gives, text for text.

Ints = npt.NDArray[np.int64]

#: Label of each priority (the index is the priority: lower wins when secrets overlap).
_LABELS: tuple[str, ...] = tuple(_PRIORITY)
_P_EMAIL = _PRIORITY["email"]


def _groups(*parts: str) -> str:
    return "".join(f"({p})" for p in parts)


#: Up to this many matches a pattern's spans come from its match objects; past it, from ``split``
#: (whose pieces copy the subject: ~0.5 ms at 5 MiB, the price of one match object per ~500).
_FEW_MATCHES = 256


def _split_spans(pattern: re.Pattern[Any], subject: Any, group: int) -> tuple[Ints, Ints]:
    """Start and end of ``group`` in each match of ``pattern``, whose groups must cover each match
    whole and always take part (so the pieces ``split`` returns add up to the subject)."""
    first = list(itertools.islice(pattern.finditer(subject), _FEW_MATCHES + 1))
    if len(first) <= _FEW_MATCHES:
        spans = np.array([m.span(group) for m in first], np.int64).reshape(-1, 2)
        return spans[:, 0], spans[:, 1]
    parts = pattern.split(subject)
    k = pattern.groups + 1
    m = (len(parts) - 1) // k
    if not m:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    bounds = np.cumsum(np.fromiter(map(len, parts), np.int64, len(parts)))
    return bounds[group - 1 : m * k : k], bounds[group : m * k + 1 : k]


def _bulk_word(word: str, suffix: str) -> re.Pattern[bytes]:
    return re.compile(_groups(re.escape(word) + suffix + _VALUE_HEAD + _VALUE_BODY).encode())


_B_KEYS = tuple((needles, re.compile(_groups(p.pattern))) for needles, p in _KEYS)
_B_PEM = re.compile(_groups(_PEM.pattern))
_B_URL = re.compile(_groups(r"://[^\s:/?#@]++:", r"[^\s@/?#]++", "@"))
# On the ASCII view (ASCII classes only). _EMAIL_DOMAIN with its first label outside the counted
# group (a slow opcode in CPython's engine; the label is possessive, so the same either way), and
# the common domain, a top-level label not followed by a dot, tried first without the group:
# where it matches, _EMAIL_DOMAIN matches the same (no second label: no dot follows), and where
# it does not, the group decides.
_B_EMAIL = re.compile(
    _groups(
        r"@[A-Za-z0-9\-]{1,63}+\.(?:[A-Za-z]{2,63}+(?![A-Za-z0-9\-.])"
        r"|(?:[A-Za-z0-9\-]{1,63}+\.){0,15}[A-Za-z]{2,63}+(?![A-Za-z0-9\-]))"
    ).encode()
)


def _whole(pattern: re.Pattern[bytes]) -> re.Pattern[bytes]:
    """``pattern`` with its groups made non-capturing, as one group (its classes hold no "(")."""
    return re.compile(_groups(re.sub(r"(?<!\\)\((?!\?)", "(?:", pattern.pattern.decode())).encode())


# The header rules and the assignments are matched whole (two pieces a match, not three: the
# pieces are most of the cost in a flood); where the value starts is found in numpy (_skip).
_B_BEARER, _B_BASIC, _B_COOKIE = _whole(_BEARER), _whole(_BASIC), _whole(_COOKIE)
_B_ASSIGN = tuple((w.encode(), _bulk_word(w, suffix)) for w, suffix in _SECRET_WORDS)
_B_AWS = re.compile(_groups(_AWS_RUN.pattern.decode()).encode())
# _CARD with the 4-4-4-4 form first and its optional fifth group as a branch (CPython's engine runs
# an optional group through a slow repeat opcode): the forms exclude one another (the character
# after the first group, and the fifth after the separator, tell them apart), so the order does
# not change what matches.
_B_CARD_PATTERN = (
    r"0000(?<![0m]0000)(?:[sm]0000[sm]0000[sm]0000(?:[sm]000(?!0)|(?!0))"
    r"|0{9,15}(?!0)|[sm]000000[sm]0000(?:0)?(?!0))"
)
_B_CARD = re.compile(_groups(_B_CARD_PATTERN).encode())
# A run of 20+ digits holds no card (no candidate starts inside a run: the look-behind; none at its
# start: a candidate's groups are at most 19 digits and end where the digits do), so where _CARD
# fails such a run is taken whole: the engine does not try a candidate at each of its digits.
_B_CARD_RUNS = re.compile(_groups(_B_CARD_PATTERN + "|0{20,}+").encode())
_B_SSN = re.compile(_groups(_SSN.pattern.decode()).encode())

#: A flood of ``Basic`` anchors: more than this many, at least one per 256 characters.
_FLOOD = 4096
_FLOOD_EVERY = 256


def _lut(chars: bytes) -> npt.NDArray[np.bool_]:
    table = np.zeros(256, bool)
    table[np.frombuffer(chars, np.uint8)] = True
    return table


_BLANK = _lut(b" \t")
_NOT_SEPARATOR = ~_lut(b":=")
_QUOTE = _lut(b"\"'")


def _skip(codes: npt.NDArray[np.uint8], pos: Ints, chars: npt.NDArray[np.bool_], most: int) -> Ints:
    """``pos`` moved past up to ``most`` characters in ``chars`` (a table), each independently
    (a position that stopped stays: it reads the same character again). ``codes`` ends in a NUL
    that no table but _NOT_SEPARATOR holds (and a separator is always found before it)."""
    pos = pos.copy()
    for _ in range(most):
        step = chars[codes[pos]]
        if not step.any():
            break
        pos += step
    return pos


def _header_values(
    low: bytes, codes: npt.NDArray[np.uint8], pattern: re.Pattern[bytes], word: bytes
) -> tuple[Ints, Ints]:
    """Where the values of a header rule (``bearer``, ``basic``, ``cookie``) start and end: after
    the word, the blanks and (a cookie) the colon and blanks. ``codes``: ``low`` and a NUL."""
    starts, ends = _split_spans(pattern, low, 1)
    if len(starts):
        starts = _skip(codes, starts + len(word), _BLANK, 8)
        if word == b"cookie":
            starts = _skip(codes, _skip(codes, starts, _lut(b":"), 1), _BLANK, 8)
    return starts, ends


def _assigned_values(
    low: bytes, codes: npt.NDArray[np.uint8], pattern: re.Pattern[bytes], word: bytes
) -> tuple[Ints, Ints]:
    """Where the values of an assignment start and end: past the word and its suffix (no ":" or
    "=" in either, nor in the quote and blanks before the separator: 32 characters at most), the
    separator, 0–8 blanks and the opening quote (where the value is quoted: its first character
    is then a quote; an unquoted value never starts with one). ``codes``: ``low`` and a NUL."""
    starts, ends = _split_spans(pattern, low, 1)
    if len(starts):
        sep = _skip(codes, starts + len(word), _NOT_SEPARATOR, 32)
        starts = _skip(codes, _skip(codes, sep + 1, _BLANK, 8), _QUOTE, 1)
    return starts, ends


_LOCAL_CHARS = _lut(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._%+-")
_UPPER, _LOWER, _DIGIT = (_lut(bytes(range(a, b + 1))) for a, b in ((65, 90), (97, 122), (48, 57)))


def _gather(codes: npt.NDArray[np.uint8], starts: Ints, width: int) -> npt.NDArray[np.uint8]:
    """``codes[start + j]`` for each ``j < width`` (a row) and each start (a column; 0 past the
    end): column-wise, so each operation below runs over all candidates at once."""
    padded = np.concatenate((codes, np.zeros(width, np.uint8)))
    return np.ascontiguousarray(np.lib.stride_tricks.sliding_window_view(padded, width)[starts].T)


def _email_starts(codes: npt.NDArray[np.uint8], at: Ints) -> Ints:
    """Where the address whose domain starts at each ``at`` (its "@") starts: up to 64 local-part
    characters before it (``at`` itself where there are none). One step per character: the first
    8 over every address, the rest over the addresses whose local part goes on."""
    n = np.zeros(len(at), np.int64)
    going = at > 0
    pos = np.maximum(at - 1, 0)
    for _ in range(8):
        going &= _LOCAL_CHARS[codes[pos]]
        if not going.any():
            return at - n
        n += going
        going &= pos > 0
        pos = np.maximum(pos - 1, 0)
    alive = np.flatnonzero(going)
    for j in range(9, 65):
        alive = alive[at[alive] >= j]
        alive = alive[_LOCAL_CHARS[codes[at[alive] - j]]]
        if not len(alive):
            break
        n[alive] = j
    return at - n


def _cards_ok(codes: npt.NDArray[np.uint8], starts: Ints, ends: Ints) -> npt.NDArray[np.bool_]:
    """:func:`_card_network` and :func:`_luhn_ok` of every candidate at once (13–19 digits, spaces
    or dashes between groups: at most 23 characters)."""
    length = ends - starts
    width = int(length.max())
    c = _gather(codes, starts, width) - np.uint8(48)  # a digit is < 10 (a space or dash wraps over)
    is_digit = (c < 10) & (np.arange(width)[:, None] < length)
    d = (c * is_digit).view(np.int8)
    seen = np.empty(d.shape, np.int8)  # digits up to each, from the left (numpy's cumsum along
    count = np.zeros(len(starts), np.int8)  # the first axis is ~100× slower than this loop)
    for j in range(width):
        count += is_digit[j]
        seen[j] = count
    odd = (count ^ seen) & 1  # an odd count of digits to its right: doubled
    doubled = d * (odd + 1) - 9 * (odd & (d > 4))
    luhn = doubled.sum(axis=0, dtype=np.int16) % 10 == 0
    d16 = d[:4].astype(np.int16)  # a candidate starts with 4 digits
    four = d16[0] * 1000 + d16[1] * 100 + d16[2] * 10 + d16[3]
    two, three = four // 100, four // 10
    n = count
    n16_19 = (n >= 16) & (n <= 19)
    network = np.select(
        [
            d[0] == 4,
            ((two >= 51) & (two <= 55)) | ((four >= 2221) & (four <= 2720)),
            (two == 34) | (two == 37),
            (four == 6011) | (two == 65) | ((three >= 644) & (three <= 649)),
            (four >= 3528) & (four <= 3589),
            (two == 36) | (two == 38) | (two == 39) | ((three >= 300) & (three <= 305)),
            (two == 62) | (two == 81),
        ],
        [(n == 13) | (n == 16) | (n == 19), n == 16, n == 15, n16_19, n16_19, (n >= 14) & (n <= 19), n16_19],
        False,
    )
    return np.asarray(network & luhn, bool)


def _ssns_ok(codes: npt.NDArray[np.uint8], starts: Ints) -> npt.NDArray[np.bool_]:
    """The SSA's ranges of every ``ddd-dd-dddd`` candidate at once (as in :func:`_find_spans`)."""
    d = _gather(codes, starts, 11).astype(np.int16) - 48
    area = d[0] * 100 + d[1] * 10 + d[2]
    group = d[4] * 10 + d[5]
    serial = d[7] * 1000 + d[8] * 100 + d[9] * 10 + d[10]
    return np.asarray((area != 0) & (area != 666) & (d[0] != 9) & (group != 0) & (serial != 0), bool)


def _aws_mixed(codes: npt.NDArray[np.uint8], starts: Ints) -> npt.NDArray[np.bool_]:
    """:data:`_AWS_MIXED` of every 40-character run at once: an upper, a lower and a digit."""
    c = _gather(codes, starts, 40)
    return np.asarray(_UPPER[c].any(axis=0) & _LOWER[c].any(axis=0) & _DIGIT[c].any(axis=0), bool)


def _flood(count: int, length: int) -> bool:
    return count > _FLOOD and count * _FLOOD_EVERY >= length


_B64_LOW = _lut(b"abcdefghijklmnopqrstuvwxyz0123456789+/=")


def _basic_flood(low: bytes, padded: npt.NDArray[np.uint8]) -> tuple[Ints, Ints]:
    """The coarse pass of a flood of ``basic`` anchors (in the lower-cased view): every run of
    base64 characters after ``basic`` (not ending a longer word) and 1–8 spaces or tabs, whether
    or not it decodes to ``user:password``. Each value :data:`_BASIC` finds is such a run (the
    same span), so nothing it would redact survives; what else is masked is the look-alikes of
    the flood (``Basic`` followed by an ordinary word). No Python work per anchor."""
    codes = np.frombuffer(low, np.uint8)
    n = len(codes)
    at = np.flatnonzero(codes[: max(0, n - 6)] == ord("b"))
    for j, ch in enumerate(b"asic", 1):
        at = at[codes[at + j] == ch]
    at = at[(at == 0) | ~_LOWER[codes[at - 1]]]  # not the end of a longer word
    value = at + 5
    value = value[_BLANK[codes[value]]] + 1  # one blank at least (within the text: at < n - 6)
    value = _skip(padded, value, _BLANK, 7)
    if not len(value):
        return value, value
    stops = np.flatnonzero(~_B64_LOW[codes])
    k = np.searchsorted(stops, value)
    end = np.where(k < len(stops), stops[np.minimum(k, len(stops) - 1)], n)
    keep = end > value
    return value[keep], end[keep]


class _Found:
    """Spans found by the bulk path: arrays of starts, ends and priorities; e-mails apart."""

    def __init__(self) -> None:
        self.starts: list[Ints] = []
        self.ends: list[Ints] = []
        self.prios: list[Ints] = []

    def add(self, starts: Ints, ends: Ints, label: str) -> None:
        if len(starts):
            self.starts.append(starts)
            self.ends.append(ends)
            self.prios.append(np.full(len(starts), _PRIORITY[label], np.int64))

    def arrays(self) -> tuple[Ints, Ints, Ints]:
        if not self.starts:
            empty = np.empty(0, np.int64)
            return empty, empty, empty
        if len(self.starts) == 1:
            return self.starts[0], self.ends[0], self.prios[0]
        return np.concatenate(self.starts), np.concatenate(self.ends), np.concatenate(self.prios)


def _find_spans_bulk(text: str, rules: frozenset[str]) -> tuple[Ints, Ints, Ints]:
    """:func:`_find_spans` for a long text, as arrays (starts, ends, priorities), unordered."""
    found = _Found()
    has = _Anchors(text)
    api, bearer = "api_key" in rules, "bearer" in rules
    if api:
        if has.has("pem", "PRIVATE KEY-----"):
            found.add(*_split_spans(_B_PEM, text, 1), "private_key")
        for i, (needles, pattern) in enumerate(_B_KEYS):
            if has.key(i, needles):
                found.add(*_split_spans(pattern, text, 1), "api_key")
    if "url_password" in rules and has.has("url", "://"):
        found.add(*_split_spans(_B_URL, text, 2), "password")
    raw = text.encode("ascii", "replace")
    codes = np.frombuffer(raw, np.uint8)
    if "email" in rules and has.has("email", "@"):
        at, end = _split_spans(_B_EMAIL, raw, 1)
        if len(at):
            start = _email_starts(codes, at)
            keep = start < at  # "@app.route" is a decorator, not an address
            found.add(start[keep], end[keep], "email")
    low = raw.lower() if api or bearer else b""
    if (api or bearer) and has.any_word(_WORDS, low):
        low_codes = np.frombuffer(low + b"\0", np.uint8)
        if bearer:
            if has.word(b"bearer", low):
                found.add(*_header_values(low, low_codes, _B_BEARER, b"bearer"), "bearer")
            if has.word(b"basic", low):
                if _flood(low.count(b"basic"), len(text)):
                    found.add(*_basic_flood(low, low_codes), "basic_auth")
                else:  # the exact check, a base64 decoding each
                    starts, ends = _header_values(low, low_codes, _B_BASIC, b"basic")
                    pairs = zip(starts.tolist(), ends.tolist(), strict=True)
                    credentials = np.array([_basic_credentials(text[s:e]) for s, e in pairs], bool)
                    found.add(starts[credentials], ends[credentials], "basic_auth")
            if has.word(b"cookie", low):
                found.add(*_header_values(low, low_codes, _B_COOKIE, b"cookie"), "cookie")
        if api:
            for word, bpattern in _B_ASSIGN:
                if has.word(word, low):
                    found.add(*_assigned_values(low, low_codes, bpattern, word), "api_key")
    if not has.digit():  # no card, SSN or AWS secret (each holds a digit)
        return found.arrays()
    if api:
        starts, _ = _split_spans(_B_AWS, b"".join((b".", raw, b".")).translate(_B64_VIEW), 1)
        if len(starts):
            starts = starts[_aws_mixed(codes, starts)]
            found.add(starts, starts + 40, "api_key")
    if "card" in rules or "ssn" in rules:
        digits = raw.translate(_DIGIT_VIEW)
        if "card" in rules and b"0000" in digits:
            if b"0" * 20 in digits:
                starts, ends = _split_spans(_B_CARD_RUNS, digits, 1)
                run = ends - starts >= 20
                run[run] = np.frombuffer(digits, np.uint8)[starts[run] + 4] == 48  # not "0000s0000s…"
                starts, ends = starts[~run], ends[~run]
            else:
                starts, ends = _split_spans(_B_CARD, digits, 1)
            if len(starts):
                ok = _cards_ok(codes, starts, ends)
                found.add(starts[ok], ends[ok], "card")
        if "ssn" in rules and b"m00m" in digits:  # in every candidate; "000m…" is slow to find among cards
            starts, ends = _split_spans(_B_SSN, digits, 1)
            if len(starts):
                ok = _ssns_ok(codes, starts)
                found.add(starts[ok], ends[ok], "ssn")
    return found.arrays()


def _merge_sorted(starts: Ints, ends: Ints, prios: Ints) -> tuple[Ints, Ints, Ints]:
    """:func:`_merge`'s first loop over spans sorted by start: a span that starts before the ends
    of all before it joins their group; a group keeps its highest priority (lowest number)."""
    if len(starts) < 2:
        return starts, ends, prios
    reach = np.maximum.accumulate(ends)
    first = np.flatnonzero(np.concatenate(([True], starts[1:] >= reach[:-1])))
    if len(first) == len(starts):
        return starts, ends, prios
    return starts[first], np.maximum.reduceat(ends, first), np.minimum.reduceat(prios, first)


def _merge_bulk(starts: Ints, ends: Ints, prios: Ints) -> tuple[Ints, Ints, Ints]:
    """:func:`_merge` on arrays: sorted, disjoint spans (same groups, same labels)."""
    if len(starts) > 1 and (starts[1:] >= ends[:-1]).all():  # sorted and disjoint: nothing to merge
        return starts, ends, prios
    email = prios == _P_EMAIL
    o = ~email
    os_, oe, op = starts[o], ends[o], prios[o]
    if len(os_) > 1 and not (os_[1:] > os_[:-1]).all():  # one rule's spans come sorted
        order = np.lexsort((oe, os_))
        os_, oe, op = os_[order], oe[order], op[order]
    ms, me, mp = _merge_sorted(os_, oe, op)
    es, ee = starts[email], ends[email]
    if not len(es):
        return ms, me, mp
    if len(es) > 1 and not (es[1:] > es[:-1]).all():
        order = np.lexsort((ee, es))
        es, ee = es[order], ee[order]
    if len(ms):  # an e-mail that overlaps another secret is dropped
        i = np.searchsorted(ms, ee)  # spans starting before the e-mail ends
        keep = (i == 0) | (me[np.maximum(i - 1, 0)] <= es)
        es, ee = es[keep], ee[keep]
    es, ee, ep = _merge_sorted(es, ee, np.full(len(es), _P_EMAIL, np.int64))
    s, e, p = np.concatenate((ms, es)), np.concatenate((me, ee)), np.concatenate((mp, ep))
    order = np.argsort(s, kind="stable")
    return s[order], e[order], p[order]


#: More spans than this in a mask-mode text: the output is rebuilt in numpy, not sliced.
_FEW = 2000

_MASK_BYTES = tuple(_MASK[label].encode() for label in _LABELS)


def _mask_numpy(text: str, starts: Ints, ends: Ints, prios: Ints) -> str:
    """Mask-mode output in numpy: each span's first character becomes a marker naming its label,
    the rest of the span is dropped, and each marker is replaced by its token. An ASCII text is
    one byte a character and its markers bytes ≥ 0x80; any other is UTF-32 and its markers
    0xFFFFFF00 + label, which no character is, and which no 4 bytes astride two characters or a
    character and a marker can spell (a character's top byte is 0, its third at most 0x10)."""
    ascii_ = text.isascii()
    if ascii_:
        codes = np.frombuffer(text.encode("ascii"), np.uint8).copy()
    else:
        codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), "<u4").copy()
    n = len(codes)
    edge = np.zeros(n + 1, np.int8)
    edge[starts] += 1
    edge[ends] -= 1  # spans are disjoint: starts are distinct, ends are too
    keep = np.cumsum(edge[:n], dtype=np.int8) == 0
    keep[starts] = True
    codes[starts] = (0x80 if ascii_ else 0xFFFFFF00) + prios
    out: bytes = codes[keep].tobytes()
    for p in np.flatnonzero(np.bincount(prios, minlength=len(_LABELS))).tolist():
        if ascii_:
            out = out.replace(bytes((0x80 + p,)), _MASK_BYTES[p])
        else:
            out = out.replace((0xFFFFFF00 + p).to_bytes(4, "little"), _MASK[_LABELS[p]].encode("utf-32-le"))
    return out.decode("ascii") if ascii_ else out.decode("utf-32-le", "surrogatepass")


@dataclass(frozen=True)
class Redactor:
    """Replace secrets and personal data in text and in JSON-like values.

    Parameters
    ----------
    rules:
        Which rules run (subset of :data:`RULES`); default all.
    mode:
        ``"mask"`` or ``"hash"`` (see the module docstring).
    salt:
        HMAC key of hash mode; set it per deployment so hashes can't be looked up in a table.
    """

    rules: frozenset[str] = field(default_factory=lambda: frozenset(RULES))
    mode: RedactionMode = "mask"
    salt: str = ""

    def __post_init__(self) -> None:
        unknown = set(self.rules) - set(RULES)
        if unknown:
            raise ValueError(f"unknown redaction rules {sorted(unknown)}; valid: {', '.join(RULES)}")
        if self.mode not in ("mask", "hash"):
            raise ValueError(f"redaction mode must be 'mask' or 'hash'; got {self.mode!r}")

    @classmethod
    def from_names(cls, rules: Iterable[str], mode: RedactionMode = "mask", salt: str = "") -> Redactor:
        return cls(rules=frozenset(r.strip() for r in rules if r.strip()), mode=mode, salt=salt)

    @property
    def enabled(self) -> bool:
        return bool(self.rules)

    def _token(self, rule: str, secret: str) -> str:
        if self.mode == "hash":
            digest = hmac.new(self.salt.encode(), secret.encode(), hashlib.sha256).hexdigest()[:12]
            return f"[{rule}:{digest}]"
        return f"[REDACTED:{rule}]"

    def redact_text(self, text: str) -> str:
        """``text`` with every enabled rule's matches replaced (overlapping matches merge)."""
        if len(text) < _SHORTEST or not self.rules:
            return text
        if len(text) > _LONG:
            b_starts, b_ends, prios = _merge_bulk(*_find_spans_bulk(text, self.rules))
            if self.mode == "mask" and len(b_starts) > _FEW:
                return _mask_numpy(text, b_starts, b_ends, prios)
            starts, ends = b_starts.tolist(), b_ends.tolist()
            labels = list(map(_LABELS.__getitem__, prios.tolist()))
        else:
            spans = _merge(_find_spans(text, self.rules))
            starts, ends, labels = list(map(_FIRST, spans)), list(map(_SECOND, spans)), list(map(_THIRD, spans))
        if not starts:
            return text
        gaps = list(map(text.__getitem__, map(slice, [0, *ends], [*starts, len(text)])))
        if self.mode == "mask":
            tokens = list(map(_MASK.__getitem__, labels))
        else:  # one HMAC per distinct secret (a flood repeats its secrets)
            secrets = list(map(text.__getitem__, map(slice, starts, ends)))
            pairs = list(zip(labels, secrets, strict=True))
            distinct = {pair: self._token(*pair) for pair in set(pairs)}
            tokens = list(map(distinct.__getitem__, pairs))
        out = [""] * (2 * len(starts) + 1)
        out[::2] = gaps
        out[1::2] = tokens
        return "".join(out)

    def redact(self, value: Any, *, _key: str | None = None) -> Any:
        """A copy of a JSON-like ``value`` with every string (keys too) redacted.

        A value stored under a sensitive key (``password``, ``private_key``, ``authorization``…) is
        replaced whole when the ``api_key`` rule is on.
        """
        if not self.rules:
            return value
        if _key is not None and "api_key" in self.rules and _sensitive_key(_key):
            if isinstance(value, str) and value:
                return value if _is_token(value) else self._token("api_key", value)
            if (
                isinstance(value, int | float)
                and not isinstance(value, bool)
                and _NUMERIC_SECRET_KEY.search(_key) is not None
            ):
                return self._token("api_key", str(value))
        if isinstance(value, str):
            return self.redact_text(value)
        if isinstance(value, dict):
            return {self.redact_text(str(k)): self.redact(v, _key=str(k)) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.redact(v) for v in value]
        return value

    def redact_trace(self, trace: Trace) -> Trace:
        """A copy of ``trace`` with its text redacted (ids kept: the store is keyed by them)."""
        if not self.rules:
            return trace
        steps = self.redact_steps(trace.steps)
        # None kept: some fields are required but nullable (a label's ``kind`` when a set says where,
        # not how); dropping them made a valid trace fail its own re-validation (a 500)
        data = trace.model_dump(mode="json", exclude={"steps", "id", "session_id"})
        clean = self.redact(data)
        out = Trace.model_validate({**clean, "id": trace.id, "session_id": trace.session_id})
        out.steps = steps
        return out

    def redact_steps(self, steps: list[Step]) -> list[Step]:
        """Redacted copies of ``steps`` (a step with nothing to redact is returned as it is)."""
        if not self.rules:
            return list(steps)
        out = []
        for s in steps:
            data = s.model_dump(mode="json", exclude_none=True)
            clean = self.redact(data)
            out.append(s if clean == data else Step.model_validate(clean))
        return out


#: No secret any rule finds is shorter (``a@b.io``).
_SHORTEST = 6


@functools.lru_cache(maxsize=4096)
def _sensitive_key(key: str) -> bool:
    return _SENSITIVE_KEY.search(key) is not None


_TOKEN = re.compile(r"\[(?:REDACTED:[a-z_]+|[a-z_]+:[0-9a-f]{12})\]")


def _is_token(value: str) -> bool:
    """Whether ``value`` is one of our own replacement tokens (redaction is idempotent)."""
    return _TOKEN.fullmatch(value) is not None


__all__ = ["RULES", "RedactionMode", "Redactor"]

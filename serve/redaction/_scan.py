"""The exact path (texts up to ``_LONG`` characters): which anchors a text holds, each rule's
matches with the checks after a match in Python, and the merge of overlapping spans."""

from __future__ import annotations

import bisect
import functools
import operator
import re
from collections.abc import Iterable
from typing import Any

import re2

from serve.redaction._patterns import (
    ASSIGN,
    AWS_MIXED,
    AWS_RUN,
    B64_VIEW,
    BASIC,
    BEARER,
    CARD,
    COOKIE,
    DIGIT_VIEW,
    EMAIL_DOMAIN,
    EMAIL_LOCAL_REVERSED,
    KEYS,
    PEM,
    PRIORITY,
    SSN,
    URL_PASSWORD,
    WORDS,
    Span,
    basic_credentials,
    card_network,
    luhn_ok,
)


@functools.cache
def _anchor_set() -> tuple[Any, tuple[str, ...]]:
    """An RE2 set of every rule's literal anchors and the name of each: ``key<i>`` (``KEYS[i]``),
    ``pem``, ``url``, ``email``, ``digit``, and the words searched in the lower-cased view
    (case-insensitive: a superset of what the view holds). Literals and single character classes
    only, so the DFA has a few hundred states and cannot run out of memory (RE2's set would then
    say "no match")."""
    names: list[str] = []
    anchors = re2.Set.SearchSet(re2.Options())

    def add(pattern: str, name: str) -> None:
        anchors.Add(pattern)
        names.append(name)

    for i, (needles, _) in enumerate(KEYS):
        for needle in needles:
            add(re.escape(needle), f"key{i}")
    add(re.escape("PRIVATE KEY-----"), "pem")
    add(re.escape("://"), "url")
    add(r"@[A-Za-z0-9\-]", "email")  # what the domain pattern needs after the "@"
    add("[0-9]", "digit")  # what cards, SSNs and AWS secrets need (the bulk path asks)
    for word in WORDS:
        add("(?i)" + re.escape(word.decode()), word.decode())
    anchors.Compile()
    return anchors, tuple(names)


def _trie(needles: Iterable[str]) -> str:
    """One expression that finds any of ``needles`` (literals), as a trie of alternations: the regex
    engine tries an alternative per first character, not one per needle (about 3× faster on short
    texts than the flat alternation). A needle that another one starts with stands for both: the
    expression only ever says whether *some* needle is there."""
    by_first: dict[str, list[str]] = {}
    for needle in needles:
        by_first.setdefault(needle[:1], []).append(needle[1:])
    parts = [re.escape(c) + ("" if "" in rests else _trie(rests)) for c, rests in sorted(by_first.items())]
    return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"


#: The words of the lower-cased view in one expression (a short text without any skips them all).
_ANY_WORD = re.compile(_trie(w.decode() for w in WORDS).encode())

#: Every key group's literal prefixes in one expression: only ever used to say "none is here"
#: (a match sends the text to the per-group tests, so overlapping needles cannot hide one).
_KEY_NEEDLES = sorted({n for needles, _ in KEYS for n in needles})
_ANY_KEY_NEEDLE = re.compile(_trie(_KEY_NEEDLES))
#: Above this many characters the key needles are looked for by RE2 (its DFA: linear, a few µs to
#: set up; Python's engine tries the trie at every position a needle's first character is, ~70 ns a
#: character). RE2 reads the text's UTF-8 bytes as Latin-1: the needles are ASCII, so they are found
#: at the same places, and a lone surrogate (encoded as it is) matches none of them.
_RE2_FROM = 128


@functools.cache
def _key_needles_re2() -> Any:
    options = re2.Options()
    options.encoding = re2.Options.Encoding.LATIN1
    return re2.compile("|".join(re.escape(n) for n in _KEY_NEEDLES).encode(), options)


@functools.cache
def _words_re2() -> Any:
    options = re2.Options()
    options.encoding = re2.Options.Encoding.LATIN1
    return re2.compile(b"|".join(re.escape(w) for w in WORDS), options)


def any_key_needle(text: str) -> bool:
    """Whether ``text`` holds any key group's literal prefix (:data:`KEYS`)."""
    if len(text) < _RE2_FROM:
        return _ANY_KEY_NEEDLE.search(text) is not None
    return _key_needles_re2().search(text.encode("utf-8", "surrogatepass")) is not None


def any_word(low: bytes) -> bool:
    """Whether the lower-cased ASCII view ``low`` holds one of :data:`WORDS` (RE2 from :data:`_RE2_FROM` bytes)."""
    if len(low) < _RE2_FROM:
        return _ANY_WORD.search(low) is not None
    return _words_re2().search(low) is not None


class Anchors:
    """Which anchors ``text`` holds: one RE2 pass for a ``long`` text (the bulk path's), substring
    tests for a short one."""

    def __init__(self, text: str, *, long: bool) -> None:
        self.text = text
        self.found: frozenset[str] | None = None
        # a short text: one C-level scan says whether any key prefix is there at all (most texts —
        # JSON keys, ids, ordinary words — hold none; then no key group is asked one by one)
        self.no_key = not long and not any_key_needle(text)
        if long:
            anchors, names = _anchor_set()
            try:
                self.found = frozenset(names[i] for i in anchors.Match(text) or ())
            except UnicodeEncodeError:  # a lone surrogate: no UTF-8 for RE2; test each anchor
                self.found = None

    def any_word(self, words: Iterable[bytes], low: bytes) -> bool:
        """Whether the lower-cased view ``low`` may hold one of ``words`` (:data:`WORDS`; a short
        text is asked by one scan of ``low``)."""
        if self.found is None:
            return any_word(low)
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


def find_spans(text: str, rules: frozenset[str]) -> list[Span]:
    """Where the secrets in ``text`` are: ``(start, end, label)``, unordered, maybe overlapping."""
    spans: list[Span] = []
    add = spans.append
    has = Anchors(text, long=False)
    api, bearer = "api_key" in rules, "bearer" in rules
    if api:
        if has.has("pem", "PRIVATE KEY-----"):
            spans += [(*m.span(), "private_key") for m in PEM.finditer(text)]
        if not has.no_key:
            for i, (needles, pattern) in enumerate(KEYS):
                if has.key(i, needles):
                    spans += [(*m.span(), "api_key") for m in pattern.finditer(text)]
    if "url_password" in rules and has.has("url", "://"):
        spans += [(*m.span(1), "password") for m in URL_PASSWORD.finditer(text)]
    if "email" in rules and has.has("email", "@"):
        for m in EMAIL_DOMAIN.finditer(text):
            at = m.start()
            local = EMAIL_LOCAL_REVERSED.match(text[max(0, at - 64) : at][::-1])
            n = local.end() if local is not None else 0
            if n:  # "@app.route" is a decorator, not an address
                add((at - n, m.end(), "email"))
    if not (api or bearer or "card" in rules or "ssn" in rules):
        return spans
    # One ASCII view, index for index (a non-ASCII character becomes "?"), lower-cased.
    raw = text.encode("ascii", "replace")
    low = raw.lower() if api or bearer else b""
    if (api or bearer) and has.any_word(WORDS, low):
        if bearer:
            if has.word(b"bearer", low):
                spans += [(*mb.span(1), "bearer") for mb in BEARER.finditer(low)]
            if has.word(b"basic", low):
                for mb in BASIC.finditer(low):
                    if basic_credentials(text[mb.start(1) : mb.end(1)]):
                        add((mb.start(1), mb.end(1), "basic_auth"))
            if has.word(b"cookie", low):
                spans += [(*mb.span(1), "cookie") for mb in COOKIE.finditer(low)]
        if api:
            for word, bpattern in ASSIGN:
                if has.word(word, low):
                    # the value is the one group of the three that took part; our own tokens
                    # are refused by _VALUE's look-ahead
                    spans += [(*mb.span(mb.lastindex or 0), "api_key") for mb in bpattern.finditer(low)]
    if api:
        view = (b"." + raw + b".").translate(B64_VIEW)
        for mb in AWS_RUN.finditer(view):
            start = mb.start()  # the view is one character ahead
            if AWS_MIXED.match(text[start : start + 40]):
                add((start, start + 40, "api_key"))
    if "card" in rules or "ssn" in rules:
        digits = raw.translate(DIGIT_VIEW)
        if "card" in rules and b"0000" in digits:
            for mb in CARD.finditer(digits):
                number = text[mb.start() : mb.end()].replace(" ", "").replace("-", "")
                if card_network(number) and luhn_ok(number):
                    add((mb.start(), mb.end(), "card"))
        if "ssn" in rules and b"000m00m0000" in digits:
            for mb in SSN.finditer(digits):
                area, group = text[mb.start() : mb.start() + 3], text[mb.start() + 4 : mb.start() + 6]
                if area not in ("000", "666") and area[0] != "9" and group != "00" and not text.startswith(
                    "0000", mb.start() + 7
                ):
                    add((mb.start(), mb.end(), "ssn"))
    return spans


FIRST, SECOND, THIRD = operator.itemgetter(0), operator.itemgetter(1), operator.itemgetter(2)


def _disjoint(spans: list[Span]) -> bool:
    """Whether sorted ``spans`` do not overlap (neighbours suffice; compared in C by ``map``)."""
    if len(spans) < 2:
        return True
    starts = list(map(FIRST, spans))
    ends = list(map(SECOND, spans))
    return all(map(operator.le, ends[:-1], starts[1:]))


def merge(spans: list[Span]) -> list[Span]:
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
            merged[-1] = (p_start, max(p_end, end), label if PRIORITY[label] < PRIORITY[p_label] else p_label)
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



"""The bulk path (texts over ``_LONG`` characters): each pattern's matches from one ``split``,
the checks after a match and the merge in numpy, a dense mask-mode text rebuilt in numpy."""

from __future__ import annotations

import itertools
import re
from typing import Any

import numpy as np
import numpy.typing as npt

from serve.redaction._patterns import (
    AWS_RUN,
    B64_VIEW,
    BASIC,
    BEARER,
    COOKIE,
    DIGIT_VIEW,
    KEYS,
    MASK,
    PEM,
    PRIORITY,
    SECRET_WORDS,
    SSN,
    VALUE_BODY,
    VALUE_HEAD,
    WORDS,
    basic_credentials,
)
from serve.redaction._scan import Anchors

# Same rules, same spans, but no Python work per match: each pattern's matches come out of one
# ``split`` (C) as the lengths of the pieces, the checks after a match (an e-mail's local part, a
# card's network and Luhn digit, an SSN's ranges, an AWS key's mixed case) run in numpy over all
# candidates at once, spans are merged in numpy, and a mask-mode text is rebuilt in numpy.
# tests/test_redaction.py checks that it gives what the exact path (:mod:`serve.redaction._scan`) gives, text for text.

Ints = npt.NDArray[np.int64]

#: Label of each priority (the index is the priority: lower wins when secrets overlap).
LABELS: tuple[str, ...] = tuple(PRIORITY)
_P_EMAIL = PRIORITY["email"]


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
    return re.compile(_groups(re.escape(word) + suffix + VALUE_HEAD + VALUE_BODY).encode())


_B_KEYS = tuple((needles, re.compile(_groups(p.pattern))) for needles, p in KEYS)
_B_PEM = re.compile(_groups(PEM.pattern))
_B_URL = re.compile(_groups(r"://[^\s:/?#@]++:", r"[^\s@/?#]++", "@"))
# On the ASCII view (ASCII classes only). EMAIL_DOMAIN with its first label outside the counted
# group (a slow opcode in CPython's engine; the label is possessive, so the same either way), and
# the common domain, a top-level label not followed by a dot, tried first without the group:
# where it matches, EMAIL_DOMAIN matches the same (no second label: no dot follows), and where
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
_B_BEARER, _B_BASIC, _B_COOKIE = _whole(BEARER), _whole(BASIC), _whole(COOKIE)
_B_ASSIGN = tuple((w.encode(), _bulk_word(w, suffix)) for w, suffix in SECRET_WORDS)
_B_AWS = re.compile(_groups(AWS_RUN.pattern.decode()).encode())
# CARD with the 4-4-4-4 form first and its optional fifth group as a branch (CPython's engine runs
# an optional group through a slow repeat opcode): the forms exclude one another (the character
# after the first group, and the fifth after the separator, tell them apart), so the order does
# not change what matches.
_B_CARD_PATTERN = (
    r"0000(?<![0m]0000)(?:[sm]0000[sm]0000[sm]0000(?:[sm]000(?!0)|(?!0))"
    r"|0{9,15}(?!0)|[sm]000000[sm]0000(?:0)?(?!0))"
)
_B_CARD = re.compile(_groups(_B_CARD_PATTERN).encode())
# A run of 20+ digits holds no card (no candidate starts inside a run: the look-behind; none at its
# start: a candidate's groups are at most 19 digits and end where the digits do), so where CARD
# fails such a run is taken whole: the engine does not try a candidate at each of its digits.
_B_CARD_RUNS = re.compile(_groups(_B_CARD_PATTERN + "|0{20,}+").encode())
_B_SSN = re.compile(_groups(SSN.pattern.decode()).encode())

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
    """:func:`card_network` and :func:`luhn_ok` of every candidate at once (13–19 digits, spaces
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
    """The SSA's ranges of every ``ddd-dd-dddd`` candidate at once (as in :func:`find_spans`)."""
    d = _gather(codes, starts, 11).astype(np.int16) - 48
    area = d[0] * 100 + d[1] * 10 + d[2]
    group = d[4] * 10 + d[5]
    serial = d[7] * 1000 + d[8] * 100 + d[9] * 10 + d[10]
    return np.asarray((area != 0) & (area != 666) & (d[0] != 9) & (group != 0) & (serial != 0), bool)


def _aws_mixed(codes: npt.NDArray[np.uint8], starts: Ints) -> npt.NDArray[np.bool_]:
    """:data:`AWS_MIXED` of every 40-character run at once: an upper, a lower and a digit."""
    c = _gather(codes, starts, 40)
    return np.asarray(_UPPER[c].any(axis=0) & _LOWER[c].any(axis=0) & _DIGIT[c].any(axis=0), bool)


def _flood(count: int, length: int) -> bool:
    return count > _FLOOD and count * _FLOOD_EVERY >= length


_B64_LOW = _lut(b"abcdefghijklmnopqrstuvwxyz0123456789+/=")


def _basic_flood(low: bytes, padded: npt.NDArray[np.uint8]) -> tuple[Ints, Ints]:
    """The coarse pass of a flood of ``basic`` anchors (in the lower-cased view): every run of
    base64 characters after ``basic`` (not ending a longer word) and 1–8 spaces or tabs, whether
    or not it decodes to ``user:password``. Each value :data:`BASIC` finds is such a run (the
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
            self.prios.append(np.full(len(starts), PRIORITY[label], np.int64))

    def arrays(self) -> tuple[Ints, Ints, Ints]:
        if not self.starts:
            empty = np.empty(0, np.int64)
            return empty, empty, empty
        if len(self.starts) == 1:
            return self.starts[0], self.ends[0], self.prios[0]
        return np.concatenate(self.starts), np.concatenate(self.ends), np.concatenate(self.prios)


def find_spans_bulk(text: str, rules: frozenset[str]) -> tuple[Ints, Ints, Ints]:
    """:func:`find_spans` for a long text, as arrays (starts, ends, priorities), unordered."""
    found = _Found()
    has = Anchors(text, long=True)
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
    if (api or bearer) and has.any_word(WORDS, low):
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
                    credentials = np.array([basic_credentials(text[s:e]) for s, e in pairs], bool)
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
        starts, _ = _split_spans(_B_AWS, b"".join((b".", raw, b".")).translate(B64_VIEW), 1)
        if len(starts):
            starts = starts[_aws_mixed(codes, starts)]
            found.add(starts, starts + 40, "api_key")
    if "card" in rules or "ssn" in rules:
        digits = raw.translate(DIGIT_VIEW)
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
    """:func:`merge`'s first loop over spans sorted by start: a span that starts before the ends
    of all before it joins their group; a group keeps its highest priority (lowest number)."""
    if len(starts) < 2:
        return starts, ends, prios
    reach = np.maximum.accumulate(ends)
    first = np.flatnonzero(np.concatenate(([True], starts[1:] >= reach[:-1])))
    if len(first) == len(starts):
        return starts, ends, prios
    return starts[first], np.maximum.reduceat(ends, first), np.minimum.reduceat(prios, first)


def merge_bulk(starts: Ints, ends: Ints, prios: Ints) -> tuple[Ints, Ints, Ints]:
    """:func:`merge` on arrays: sorted, disjoint spans (same groups, same labels)."""
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
FEW = 2000

_MASK_BYTES = tuple(MASK[label].encode() for label in LABELS)


def mask_numpy(text: str, starts: Ints, ends: Ints, prios: Ints) -> str:
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
    for p in np.flatnonzero(np.bincount(prios, minlength=len(LABELS))).tolist():
        if ascii_:
            out = out.replace(bytes((0x80 + p,)), _MASK_BYTES[p])
        else:
            out = out.replace((0xFFFFFF00 + p).to_bytes(4, "little"), MASK[LABELS[p]].encode("utf-32-le"))
    return out.decode("ascii") if ascii_ else out.decode("utf-32-le", "surrogatepass")


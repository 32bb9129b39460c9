"""The rules' patterns and tables: key shapes by literal prefix, the assignment and header
patterns, the translated views of cards, SSNs and AWS secrets, and the checks after a match
(Luhn, card networks, ``Basic`` credentials); which label wins an overlap, and each label's mask."""

from __future__ import annotations

import base64
import binascii
import re

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


KEYS: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = tuple(
    (needles, _anchored(p, rest)) for p, needles, rest in _KEY_SHAPES
)
PEM = re.compile(
    r"-----BEGIN (?:(?!PRIVATE )[A-Z0-9]++ ){0,3}+PRIVATE KEY-----(?:[^\-]|-(?!----))*+"
    r"(?:-----END (?:(?!PRIVATE )[A-Z0-9]++ ){0,3}+PRIVATE KEY-----)?"
)
URL_PASSWORD = re.compile(r"://[^\s:/?#@]++:([^\s@/?#]++)@")
# At most 16 labels of at most 63 characters: a failed domain costs a bounded number of steps.
EMAIL_DOMAIN = re.compile(r"@(?:[A-Za-z0-9\-]{1,63}+\.){1,16}[A-Za-z]{2,63}+(?![A-Za-z0-9\-])")
EMAIL_LOCAL_REVERSED = re.compile(r"[A-Za-z0-9._%+\-]{0,64}")

# On the lower-cased ASCII view (case-insensitive words without the slow IGNORECASE scan).
SECRET_WORDS: tuple[tuple[str, str], ...] = (
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
ASSIGN: tuple[tuple[bytes, re.Pattern[bytes]], ...] = tuple(
    (w.encode(), re.compile((re.escape(w) + suffix + _VALUE).encode())) for w, suffix in SECRET_WORDS
)
# _VALUE cut in two for the bulk path (:mod:`serve.redaction._bulk`): what comes before the value (its opening quote
# too) and the value. The value's first character decides the alternative as in _VALUE: a value
# after a quote is the quoted one (the character before the value is a quote only then).
VALUE_HEAD = r"[\"']?[ \t]{0,8}+[:=][ \t]{0,8}+(?!\"?'?\[(?:redacted:|[a-z_]+:[0-9a-f]{12}\]))(?:\"|'|)"
# A quoted value with no backslash is one run of a character class (fast: one step per run, not one
# alternation per character); one with a backslash among its first 4096 characters is the
# original (the run stops there, the look-ahead fails, the next alternative gives _VALUE's value).
VALUE_BODY = (
    r"(?:(?<=\")[^\"\\\r\n]{1,4096}+(?!\\)|(?<=\")(?:[^\"\\\r\n]|\\.){1,4096}+"
    r"|(?<=')[^'\r\n]{1,4096}+|[^\s\"',;&}\])]{4,}+)"
)
SENSITIVE_KEY = re.compile(
    r"(?i)(?:password|passwd|passphrase|secret|token|api[_\-]?key|access[_\-]?key|account[_\-]?key|"
    r"private[_\-]?key|credentials?|connection[_\-]?string|authorization|cookie)"
    r"(?:[_\-]?(?:key|value|string|hash|b64|base64))?$"
)
NUMERIC_SECRET_KEY = re.compile(r"(?i)(?:password|passwd|passphrase|secret|pin)$")
BEARER = re.compile(rb"bearer(?<![a-z]bearer)[ \t]{1,8}+([a-z0-9\-._~+/]{8,}+=*+)")
BASIC = re.compile(rb"basic(?<![a-z]basic)[ \t]{1,8}+([a-z0-9+/]{4,}+={0,2}+)(?![a-z0-9+/=])")
COOKIE = re.compile(rb"cookie(?<![a-z]cookie)[ \t]{0,8}+:[ \t]{0,8}+([^\s=;\":]{1,256}+=[^\r\n\"]*+)")


def _table(mapping: dict[bytes, bytes], other: bytes) -> bytes:
    out = bytearray(other * 256)
    for chars, to in mapping.items():
        for c in chars:
            out[c] = to[0]
    return bytes(out)


# Translated views, where a shape becomes a literal the engine finds fast: every base64 character
# → "a", else "." (AWS secrets); digits → "0", space → "s", dash → "m", else "." (cards, SSNs).
B64_VIEW = _table({b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=": b"a"}, b".")
AWS_RUN = re.compile(rb"\." + b"a" * 40 + rb"(?=\.)")
AWS_MIXED = re.compile(r"(?=[^A-Z]*[A-Z])(?=[^a-z]*[a-z])(?=[^0-9]*[0-9])")
DIGIT_VIEW = _table({b"0123456789": b"0", b" ": b"s", b"-": b"m"}, b".")
CARD = re.compile(
    rb"0000(?<![0m]0000)(?:0{9,15}|[sm]0000[sm]0000[sm]0000(?:[sm]000)?|[sm]000000[sm]0000(?:0)?)(?!0)"
)
SSN = re.compile(rb"000m00m0000(?<![0m]000m00m0000)(?![0m])")


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def card_network(digits: str) -> bool:
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


def basic_credentials(token: str) -> bool:
    """Whether ``token`` is base64 of ``user:password`` (the Basic scheme), not an ordinary word."""
    try:
        raw = base64.b64decode(token + "=" * (-len(token) % 4), validate=True)
        text = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return False
    return ":" in text and text.isprintable()


Span = tuple[int, int, str]  # start, end, rule label

#: The words searched in the lower-cased view.
WORDS: tuple[bytes, ...] = (b"bearer", b"basic", b"cookie", *(w for w, _ in ASSIGN))

#: Which label wins when secrets overlap (the merged span gets one token).
PRIORITY = {
    label: i
    for i, label in enumerate(
        ("private_key", "bearer", "basic_auth", "cookie", "password", "api_key", "email", "card", "ssn")
    )
}

#: The mask-mode replacement of each label.
MASK = {label: f"[REDACTED:{label}]" for label in PRIORITY}



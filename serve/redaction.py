"""Redaction of secrets and personal data before anything is stored.

What is stored (trace text, evidence, details) passes through a :class:`Redactor` first; what is
served back to the caller in the response to the same request is not redacted (the caller sent it).

Rules (each can be switched off): ``api_key`` (well-known key shapes: ``sk-…``, ``AKIA…``,
``ghp_…``, ``xox?-…``, ``AIza…``, our own ``trg_…``, and the value of ``api_key=…``-like
assignments), ``bearer`` (``Bearer <token>``), ``url_password`` (``scheme://user:PASSWORD@host``),
``email``. Values stored under a sensitive key name (``api_key``, ``password``, ``authorization``,
``token``, ``secret``…) in a JSON object are redacted whole.

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

import hashlib
import hmac
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

RedactionMode = Literal["mask", "hash"]

RULES: tuple[str, ...] = ("api_key", "bearer", "url_password", "email")

_KEY_SHAPES = (
    r"sk-(?:ant-|proj-|live-|test-)?[A-Za-z0-9_\-]{16,}",
    r"AKIA[0-9A-Z]{16}",
    r"gh[pousr]_[A-Za-z0-9]{30,}",
    r"xox[abprs]-[A-Za-z0-9\-]{10,}",
    r"AIza[0-9A-Za-z_\-]{35}",
    r"trg_[A-Za-z0-9]{8}_[A-Za-z0-9_\-]{20,}",
)
_PATTERNS: dict[str, re.Pattern[str]] = {
    # Bearer first: its token may look like a key, and the rule name should say "bearer".
    "bearer": re.compile(r"(?i)(\bbearer\s+)([A-Za-z0-9\-._~+/]{8,}=*)"),
    "url_password": re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s:/?#@]+:)([^\s@/?#]+)(@)"),
    "api_key": re.compile(r"\b(?:" + "|".join(_KEY_SHAPES) + r")"),
    "api_key_assign": re.compile(
        r"(?i)(\b(?:api[_\-]?key|apikey|access[_\-]?token|auth[_\-]?token|secret(?:[_\-]?key)?|"
        r"password|passwd|pwd)\b[\"']?\s*[:=]\s*[\"']?)([^\s\"',;&}]{4,})"
    ),
    "email": re.compile(r"\b[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}\b"),
}
# Every rule's match contains one of these; a string without any needs no further work.
_TRIGGER = re.compile(
    r"@|://|(?i:bearer|sk-|akia|gh[pousr]_|xox[abprs]-|aiza|trg_|api|key|token|secret|pass|pwd)"
)
_SENSITIVE_KEYS = re.compile(
    r"(?i)^(?:api[_\-]?key|apikey|x[_\-]api[_\-]key|authorization|password|passwd|pwd|secret|"
    r"client[_\-]?secret|access[_\-]?token|refresh[_\-]?token|auth[_\-]?token|token)$"
)


@dataclass(frozen=True)
class Redactor:
    """Replace secrets and e-mail addresses in text and in JSON-like values.

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
        """``text`` with every enabled rule's matches replaced."""
        if not text or not self.rules or _TRIGGER.search(text) is None:
            return text  # one cheap search rules out almost every string
        if "bearer" in self.rules:
            text = _PATTERNS["bearer"].sub(lambda m: m.group(1) + self._token("bearer", m.group(2)), text)
        if "url_password" in self.rules:
            text = _PATTERNS["url_password"].sub(
                lambda m: m.group(1) + self._token("password", m.group(2)) + m.group(3), text
            )
        if "api_key" in self.rules:
            text = _PATTERNS["api_key"].sub(lambda m: self._token("api_key", m.group(0)), text)
            text = _PATTERNS["api_key_assign"].sub(
                lambda m: (
                    m.group(1)
                    + (m.group(2) if m.group(2).startswith("[") else self._token("api_key", m.group(2)))
                ),
                text,
            )
        if "email" in self.rules:
            text = _PATTERNS["email"].sub(lambda m: self._token("email", m.group(0)), text)
        return text

    def redact(self, value: Any, *, _key: str | None = None) -> Any:
        """A copy of a JSON-like ``value`` with every string redacted.

        A value stored under a sensitive key (``password``, ``api_key``, ``authorization``…) is
        replaced whole when the ``api_key`` rule is on.
        """
        if not self.rules:
            return value
        if _key is not None and "api_key" in self.rules and _SENSITIVE_KEYS.match(_key):
            if isinstance(value, str) and value:
                return self._token("api_key", value)
            if isinstance(value, int | float) and not isinstance(value, bool):
                return self._token("api_key", str(value))
        if isinstance(value, str):
            return self.redact_text(value)
        if isinstance(value, dict):
            return {k: self.redact(v, _key=str(k)) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.redact(v) for v in value]
        return value


__all__ = ["RULES", "RedactionMode", "Redactor"]

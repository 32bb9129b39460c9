"""The :class:`Redactor`: a text through the exact or the bulk path, and the walk over JSON-like
values, steps and traces."""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from model.core.schema import Step, Trace
from serve.redaction._bulk import FEW, LABELS, find_spans_bulk, mask_numpy, merge_bulk
from serve.redaction._patterns import MASK, NUMERIC_SECRET_KEY, RULES, SENSITIVE_KEY
from serve.redaction._scan import FIRST, SECOND, THIRD, find_spans, merge

RedactionMode = Literal["mask", "hash"]

#: Longer texts take the bulk path (:mod:`serve.redaction._bulk`: no Python work per match) and are
#: asked which anchors they hold in one pass of RE2's DFA; shorter ones take the exact path
#: (:mod:`serve.redaction._scan`), a substring test per anchor (cheap there, no per-call overhead).
_LONG = 65536
#: Texts up to this long that held no secret are remembered (at most :data:`_CLEAN_ENTRIES`).
_CACHED = 64
_CLEAN_ENTRIES = 8192


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
    # Short texts found clean (field names, kinds, tool names repeat in every request): answered
    # from here. Only clean ones: no secret is kept in memory longer than its request.
    _clean: dict[str, None] = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

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
        if len(text) > _CACHED:
            return self._redact_text(text)
        if text in self._clean:
            return text
        out = self._redact_text(text)
        if out == text:
            if len(self._clean) >= _CLEAN_ENTRIES:
                self._clean.clear()
            self._clean[text] = None
        return out

    def _redact_text(self, text: str) -> str:
        if len(text) > _LONG:
            b_starts, b_ends, prios = merge_bulk(*find_spans_bulk(text, self.rules))
            if self.mode == "mask" and len(b_starts) > FEW:
                return mask_numpy(text, b_starts, b_ends, prios)
            starts, ends = b_starts.tolist(), b_ends.tolist()
            labels = list(map(LABELS.__getitem__, prios.tolist()))
        else:
            spans = merge(find_spans(text, self.rules))
            starts, ends, labels = list(map(FIRST, spans)), list(map(SECOND, spans)), list(map(THIRD, spans))
        if not starts:
            return text
        gaps = list(map(text.__getitem__, map(slice, [0, *ends], [*starts, len(text)])))
        if self.mode == "mask":
            tokens = list(map(MASK.__getitem__, labels))
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
                and NUMERIC_SECRET_KEY.search(_key) is not None
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
    return SENSITIVE_KEY.search(key) is not None


_TOKEN = re.compile(r"\[(?:REDACTED:[a-z_]+|[a-z_]+:[0-9a-f]{12})\]")


def _is_token(value: str) -> bool:
    """Whether ``value`` is one of our own replacement tokens (redaction is idempotent)."""
    return _TOKEN.fullmatch(value) is not None


__all__ = ["RULES", "RedactionMode", "Redactor"]


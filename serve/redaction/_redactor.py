"""The :class:`Redactor`: a text through the exact or the bulk path, and the walk over JSON-like
values, steps and traces."""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, Literal

from pydantic import TypeAdapter

from model.core.schema import Step, ToolDefinition, Trace
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
    # Clean keys (field names repeat in every request) → (the key, sensitive, numeric secret): see _key_facts.
    _keys: dict[str, tuple[str, bool, bool]] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False)
    # Whether every field name of Step is clean and not sensitive (set on first use).
    _step_fields: bool | None = field(default=None, init=False, repr=False, compare=False, hash=False)
    # The same for the field names of Trace and ToolDefinition.
    _head_fields: bool | None = field(default=None, init=False, repr=False, compare=False, hash=False)

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
            # surrogatepass: a lone surrogate (possible in a Python str, refused at intake) hashes rather than raising
            digest = hmac.new(self.salt.encode("utf-8", "surrogatepass"), secret.encode("utf-8", "surrogatepass"),
                              hashlib.sha256).hexdigest()[:12]
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
        if _key is not None:
            sensitive, numeric = self._key_kind(_key)
            if sensitive:
                return self._sensitive(value, numeric)
        pending: list[str] = []
        copy = self._copy(value, pending)
        if copy is not _UNSURE and self._all_clean(pending):
            return copy
        return self._walk(value)

    def _all_clean(self, texts: list[str]) -> bool:
        """Whether no rule finds anything in any of ``texts``, by one scan of them joined by newlines
        (one call's fixed cost, not one per text: a diagnosis holds a few dozen short texts, each
        seen once). No pattern matches a newline where a text's edge would stop it (every class a
        match runs through, and every look-around at its ends, treats a newline as a text's edge
        does), so a secret in one text is found in the joined one; a match across two texts only
        sends the caller to the exact walk. More than one exact scan takes (``_LONG`` characters) is
        asked in chunks of that size, a longer text alone (the bulk path). Short texts found clean are
        remembered as :meth:`redact_text` remembers them."""
        if not texts:
            return True
        if len(texts) == 1:
            text = texts[0]
            if (find_spans(text, self.rules) if len(text) <= _LONG else self._redact_text(text) != text):
                return False
        else:
            # joined up to _LONG characters a scan (the exact path's size); a longer text alone (the bulk path)
            chunk: list[str] = []
            size = 0
            for item in [*texts, None]:
                if item is None or size + len(item) + 1 > _LONG:
                    if chunk and find_spans("\n".join(chunk), self.rules):
                        return False
                    chunk, size = [], 0
                if item is None:
                    break
                if len(item) > _LONG:
                    if self._redact_text(item) != item:
                        return False
                    continue
                chunk.append(item)
                size += len(item) + 1
        clean = self._clean
        for text in texts:
            if len(text) <= _CACHED:
                if len(clean) >= _CLEAN_ENTRIES:
                    clean.clear()
                clean[text] = None
        return True

    def _copy(self, value: Any, pending: list[str]) -> Any:
        """A copy of a JSON-like ``value`` as :meth:`redact` gives it when every text in it is clean,
        the texts still to be asked appended to ``pending`` (:meth:`_all_clean`); :data:`_UNSURE`
        where a key is sensitive or not known clean, or a value of a type JSON does not make."""
        t = type(value)
        if t is str:
            if len(value) >= _SHORTEST and value not in self._clean:
                pending.append(value)
            return value
        if t is dict:
            out: dict[str, Any] = {}
            keys = self._keys
            clean = self._clean
            for k, v in value.items():
                facts = keys.get(k) if type(k) is str else None
                if facts is None or facts[1]:  # a key not known clean, or sensitive: the exact walk
                    return _UNSURE
                u = type(v)
                if u is str:
                    if len(v) >= _SHORTEST and v not in clean:
                        pending.append(v)
                    out[k] = v
                elif u is int or u is float or u is bool or v is None:
                    out[k] = v
                else:
                    item = self._copy(v, pending)
                    if item is _UNSURE:
                        return _UNSURE
                    out[k] = item
            return out
        if t is list or t is tuple:
            items = []
            for v in value:
                item = self._copy(v, pending)
                if item is _UNSURE:
                    return _UNSURE
                items.append(item)
            return items
        if t is int or t is float or t is bool or value is None:
            return value
        return _UNSURE

    # The walk is the hot loop of every stored answer, state and step (a few hundred values a
    # diagnosis): the exact types JSON makes are dispatched by ``type(...) is``, short texts known
    # clean are answered inline, and each clean key's facts are remembered (:meth:`_key_facts`).
    def _walk(self, value: Any) -> Any:
        t = type(value)
        if t is str:
            return value if len(value) < _SHORTEST or value in self._clean else self.redact_text(value)
        if t is dict:
            return self._dict(value)
        if t is list or t is tuple:
            return [self._walk(v) for v in value]
        if isinstance(value, str):
            return self.redact_text(value)
        if isinstance(value, dict):
            return self._dict(value)
        if isinstance(value, list | tuple):
            return [self._walk(v) for v in value]
        return value

    def _dict(self, value: dict[Any, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        keys = self._keys
        clean = self._clean
        for k, v in value.items():
            facts = keys.get(k) if type(k) is str else None
            if facts is None:
                facts = self._key_facts(k if type(k) is str else str(k))
            red, sensitive, numeric = facts
            if sensitive:
                out[red] = self._sensitive(v, numeric)
                continue
            t = type(v)
            if t is str:
                out[red] = v if len(v) < _SHORTEST or v in clean else self.redact_text(v)
            elif t is int or t is float or t is bool or v is None:
                out[red] = v
            else:
                out[red] = self._walk(v)
        return out

    def _key_facts(self, key: str) -> tuple[str, bool, bool]:
        """``key`` redacted, whether a value under it is replaced whole, and a number too; remembered
        for a clean key of at most :data:`_CACHED` characters (at most :data:`_CLEAN_ENTRIES` of them;
        a key holding a secret is not kept)."""
        sensitive, numeric = self._key_kind(key)
        facts = (self.redact_text(key), sensitive, numeric)
        if facts[0] == key and len(key) <= _CACHED:
            if len(self._keys) >= _CLEAN_ENTRIES:
                self._keys.clear()
            self._keys[key] = facts
        return facts

    def _key_kind(self, key: str) -> tuple[bool, bool]:
        if "api_key" not in self.rules or not _sensitive_key(key):
            return False, False
        return True, NUMERIC_SECRET_KEY.search(key) is not None

    def _sensitive(self, value: Any, numeric: bool) -> Any:
        """A value under a sensitive key: a text or (``numeric``) a number replaced whole."""
        if isinstance(value, str) and value:
            return value if _is_token(value) else self._token("api_key", value)
        if numeric and isinstance(value, int | float) and not isinstance(value, bool):
            return self._token("api_key", str(value))
        return self._walk(value)

    def _unchanged(self, value: Any, pending: list[str]) -> bool:
        """Whether :meth:`redact` would give back a value equal to a JSON ``value`` once the texts it
        appends to ``pending`` are found clean (:meth:`_all_clean`); ``False`` also when not sure: a
        type JSON does not make."""
        t = type(value)
        if t is str:
            if len(value) >= _SHORTEST and value not in self._clean:
                pending.append(value)
            return True
        if t is int or t is float or t is bool or value is None:
            return True
        if t is list:
            return all(self._unchanged(v, pending) for v in value)
        if t is not dict:
            return False
        keys = self._keys
        for k, v in value.items():
            if type(k) is not str:
                return False
            facts = keys.get(k) or self._key_facts(k)
            if facts[0] != k or facts[1] or not self._unchanged(v, pending):
                return False
        return True

    def redact_trace(self, trace: Trace) -> Trace:
        """A copy of ``trace`` with its text redacted (ids kept: the store is keyed by them)."""
        if not self.rules:
            return trace
        steps = self.redact_steps(trace.steps)
        texts = self._head_texts(trace)
        if texts is not None and self._all_clean(texts):  # nothing outside the steps to redact
            return trace.model_copy(update={"steps": steps})
        # None kept: some fields are required but nullable (a label's ``kind`` when a set says where,
        # not how); dropping them made a valid trace fail its own re-validation (a 500)
        data = trace.model_dump(mode="json", exclude={"steps", "id", "session_id"})
        clean = self.redact(data)
        out = Trace.model_validate({**clean, "id": trace.id, "session_id": trace.session_id})
        out.steps = steps
        return out

    def _head_texts(self, trace: Trace) -> list[str] | None:
        """As :meth:`_step_texts`, for what :meth:`redact_trace` redacts of a trace besides its steps
        (task type, language, tools, metadata); ``None`` also for a trace with labels (rare: dumped)."""
        if self._head_fields is None:
            object.__setattr__(self, "_head_fields", all(
                self._unchanged({name: 0}, []) for name in (*Trace.model_fields, *ToolDefinition.model_fields)))
        if not self._head_fields or type(trace) is not Trace or trace.__pydantic_extra__ or trace.labels is not None:
            return None
        pending: list[str] = []
        for v in (trace.task_type, trace.language):
            if v is not None and not self._unchanged(v, pending):
                return None
        if not self._unchanged(trace.metadata, pending):
            return None
        for tool in trace.tools:
            if type(tool) is not ToolDefinition or tool.__pydantic_extra__:
                return None
            if not (self._unchanged(tool.name, pending) and self._unchanged(tool.description, pending)
                    and (tool.parameters is None or self._unchanged(tool.parameters, pending))):
                return None
        return pending

    def redact_steps(self, steps: list[Step]) -> list[Step]:
        """Redacted copies of ``steps`` (a step with nothing to redact is returned as it is).

        The texts of every step judged from its fields are asked in one scan (:meth:`_all_clean`);
        only when that scan finds something is each step asked alone, and one that holds a secret
        (or that its fields cannot judge) is dumped, redacted and validated again."""
        if not self.rules:
            return list(steps)
        texts = [self._step_texts(s) for s in steps]
        everything = [t for ts in texts if ts is not None for t in ts]
        clean_all = self._all_clean(everything)
        out = []
        for s, ts in zip(steps, texts, strict=True):
            if ts is not None and (clean_all or self._all_clean(ts)):
                out.append(s)
                continue
            data = s.model_dump(mode="json", exclude_none=True)
            clean = self.redact(data)
            out.append(s if clean == data else Step.model_validate(clean))
        return out

    def _step_texts(self, step: Step) -> list[str] | None:
        """The texts of ``step``'s JSON that decide whether redacting it changes anything (those not
        known clean), read from its fields; ``None`` when its fields cannot say (a key that is
        sensitive or not clean, a field of a type JSON does not make, an extra field)."""
        if self._step_fields is None:
            object.__setattr__(self, "_step_fields", all(self._unchanged({name: 0}, []) for name in Step.model_fields))
        values = step.__dict__
        if not self._step_fields or type(step) is not Step or step.__pydantic_extra__ or len(values) != len(Step.model_fields):
            return None
        pending: list[str] = []
        for v in values.values():
            t = type(v)
            if v is None or t is int or t is float:
                continue
            if t is str:
                if len(v) >= _SHORTEST and v not in self._clean:
                    pending.append(v)
            elif t is dict:
                if v and not self._unchanged(v, pending):
                    return None
            elif isinstance(v, Enum):
                if not self._unchanged(v.value, pending):
                    return None
            elif isinstance(v, datetime):
                if not self._unchanged(_DATETIME.dump_python(v, mode="json"), pending):
                    return None
            else:
                return None
        return pending


#: No secret any rule finds is shorter (``a@b.io``).
_SHORTEST = 6
#: What :meth:`Redactor._copy` gives where only the exact walk can say.
_UNSURE: Any = object()
#: How a step's ``timestamp`` is written in its JSON (``Step.model_dump(mode="json")``).
_DATETIME: TypeAdapter[datetime] = TypeAdapter(datetime)


@functools.lru_cache(maxsize=4096)
def _sensitive_key(key: str) -> bool:
    return SENSITIVE_KEY.search(key) is not None


_TOKEN = re.compile(r"\[(?:REDACTED:[a-z_]+|[a-z_]+:[0-9a-f]{12})\]")


def _is_token(value: str) -> bool:
    """Whether ``value`` is one of our own replacement tokens (redaction is idempotent)."""
    return _TOKEN.fullmatch(value) is not None


__all__ = ["RULES", "RedactionMode", "Redactor"]


"""serve/validation.check_json: what no store can keep is refused with the offending value's place, at
the edges of each rule (its pass without paths and its pass with them must agree)."""

from __future__ import annotations

from typing import Any

import pytest

from model.core.errors import InputError
from serve.validation import INT64_MAX, MAX_DEPTH, check_json


def _nested(depth: int, leaf: Any = 1) -> Any:
    v: Any = leaf
    for i in range(depth):
        v = [v] if i % 2 else {"k": v}
    return v


@pytest.mark.parametrize("value", [
    None, True, 0, -INT64_MAX - 1, INT64_MAX, 1.5, "", "café 航班 👍", [], {},
    {"a": [1, 2.0, None, False, "x", {"b": "ü"}], "ü": {"c": []}},
    _nested(MAX_DEPTH), (1, 2), {"t": ("a\x00",)},  # a type JSON does not make is not walked
])
def test_storable_values_pass(value: Any) -> None:
    check_json(value)


@pytest.mark.parametrize(("value", "path", "message"), [
    ({"a": ["ok", "x\x00y"]}, "a[1]", "NUL"),
    ({"ke\x00y": 1}, "ke\x00y", "NUL"),
    ([{"t": "a\ud800b"}], "[0].t", "surrogate"),
    ({"a": {"\udc00": 1}}, "a.\udc00", "surrogate"),
    ({"n": [INT64_MAX + 1]}, "n[0]", "64-bit"),
    ({"n": -INT64_MAX - 2}, "n", "64-bit"),
    ({"f": [1.0, float("inf")]}, "f[1]", "finite"),
    ("\x00", None, "NUL"),
    (INT64_MAX + 1, None, "64-bit"),
])
def test_unstorable_values_are_named(value: Any, path: str | None, message: str) -> None:
    with pytest.raises(InputError, match=message) as exc:
        check_json(value)
    assert exc.value.path == path


def test_nesting_is_refused_past_the_limit() -> None:
    check_json(_nested(MAX_DEPTH, leaf="x"))  # containers at depths 0 … MAX_DEPTH - 1
    for too_deep in (_nested(MAX_DEPTH, leaf=[]), _nested(MAX_DEPTH + 1)):  # one at depth MAX_DEPTH, even empty
        with pytest.raises(InputError, match=f"deeper than {MAX_DEPTH}"):
            check_json(too_deep)

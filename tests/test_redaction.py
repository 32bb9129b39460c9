"""Redaction before storing: each rule, hash mode, configurable rules, JSON walking."""

from __future__ import annotations

import pytest

from serve.redaction import RULES, Redactor


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("key sk-abcdefghijklmnopqrstuvwx ok", "key [REDACTED:api_key] ok"),
        ("aws AKIAABCDEFGHIJKLMNOP", "aws [REDACTED:api_key]"),
        ("gh ghp_" + "a" * 36, "gh [REDACTED:api_key]"),
        ("api_key=abcd1234efgh&x=1", "api_key=[REDACTED:api_key]&x=1"),
        ('{"password": "hunter22"}', '{"password": "[REDACTED:api_key]"}'),
        ("Authorization: Bearer abc.def-ghi_jkl12345", "Authorization: Bearer [REDACTED:bearer]"),
        ("postgres://bob:s3cr3t@db.local:5432/x", "postgres://bob:[REDACTED:password]@db.local:5432/x"),
        ("write to bob.smith+tag@example.co.uk now", "write to [REDACTED:email] now"),
        ("nothing secret: 42 apples, sk-short", "nothing secret: 42 apples, sk-short"),
    ],
)
def test_each_rule(text: str, expected: str) -> None:
    assert Redactor().redact_text(text) == expected


def test_hash_mode_is_stable_and_salted() -> None:
    a = Redactor(mode="hash", salt="one")
    b = Redactor(mode="hash", salt="two")
    x = a.redact_text("mail bob@example.com and bob@example.com")
    assert x.count("[email:") == 2 and "bob@" not in x
    first, second = x.split(" and ")
    assert first.removeprefix("mail ") == second  # equal secrets stay equal
    assert a.redact_text("bob@example.com") != b.redact_text("bob@example.com")


def test_rules_are_configurable() -> None:
    only_email = Redactor.from_names(["email"])
    assert only_email.redact_text("bob@example.com sk-abcdefghijklmnopqrstuvwx") == (
        "[REDACTED:email] sk-abcdefghijklmnopqrstuvwx"
    )
    none = Redactor.from_names([""])
    assert not none.enabled and none.redact({"password": "x"}) == {"password": "x"}
    with pytest.raises(ValueError, match="unknown redaction rules"):
        Redactor.from_names(["phone"])
    assert set(RULES) == {"api_key", "bearer", "url_password", "email"}


def test_json_values_and_sensitive_keys() -> None:
    value = {
        "headers": {"Authorization": "Basic dXNlcjpwYXNz", "Accept": "json"},
        "tool_args": {"password": "pw", "user": "a@b.io", "n": 3},
        "list": ["Bearer abcdefgh12345678", True, None],
    }
    assert Redactor().redact(value) == {
        "headers": {"Authorization": "[REDACTED:api_key]", "Accept": "json"},
        "tool_args": {"password": "[REDACTED:api_key]", "user": "[REDACTED:email]", "n": 3},
        "list": ["Bearer [REDACTED:bearer]", True, None],
    }

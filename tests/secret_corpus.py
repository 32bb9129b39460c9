"""The secret corpus (issue 15): one example of every secret format the redactor must remove, and
look-alikes it must leave alone. Secrets are generated from a seed (no real key is committed).

``SECRETS`` maps a format name to ``(text, secret)``: ``text`` carries ``secret`` the way it is met
in a trace; after redaction no 8-character piece of ``secret``'s tail may be left (a cut key leaves
its prefix, which is fine — ``sk-`` alone is not a secret — but no part of its body).
"""

from __future__ import annotations

import base64
import random
import string

_rng = random.Random(20261201)
_AN = string.ascii_letters + string.digits


def _r(n: int, alphabet: str = _AN) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


def _hex(n: int) -> str:
    return _r(n, "0123456789abcdef")


def _luhn_complete(prefix: str, length: int) -> str:
    body = prefix + "".join(_rng.choice(string.digits) for _ in range(length - len(prefix) - 1))
    for check in string.digits:
        digits = body + check
        total = 0
        for i, ch in enumerate(reversed(digits)):
            d = int(ch)
            if i % 2:
                d = d * 2 - 9 if d > 4 else d * 2
            total += d
        if total % 10 == 0:
            return digits
    raise AssertionError("unreachable")


_B64 = string.ascii_letters + string.digits + "+/"
_aws_secret = _r(18, _B64) + "Ab1" + _r(19, _B64)
_jwt = (
    base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').decode().rstrip("=")
    + "."
    + base64.urlsafe_b64encode(b'{"sub":"1234567890","name":"Ann"}').decode().rstrip("=")
    + "."
    + _r(43, _AN + "-_")
)
_pem_body = "\n".join(_r(64, _B64) for _ in range(6))
_basic = base64.b64encode(b"alice:" + _r(12).encode()).decode()

SECRETS: dict[str, tuple[str, str]] = {}


def _add(name: str, template: str, secret: str) -> None:
    SECRETS[name] = (template.format(s=secret), secret)


_add("openai", "use key {s} for the call", "sk-" + _r(48))
_add("openai_project", "OPENAI_API_KEY={s}", "sk-proj-" + _r(60, _AN + "-_"))
_add("anthropic", "x-api-key: {s}", "sk-ant-api03-" + _r(80, _AN + "-_"))
_add("stripe_live", "charge with {s}", "sk_live_" + _r(24))
_add("stripe_test", "stripe {s}", "sk_test_" + _r(24))
_add("stripe_restricted", "rk key {s}", "rk_live_" + _r(24))
_add("stripe_webhook", "whsec {s}", "whsec_" + _r(32))
_add("aws_access_key_id", "id {s}", "AKIA" + _r(16, string.ascii_uppercase + string.digits))
_add("aws_session_key_id", "id {s}", "ASIA" + _r(16, string.ascii_uppercase + string.digits))
_add("aws_secret_bare", "the secret is {s} ok", _aws_secret)
_add("aws_secret_json_key", '{{"aws_secret_access_key": "{s}"}}', _r(40, _B64))
_add("github_classic", "token {s}", "ghp_" + _r(36))
_add("github_oauth", "gho {s}", "gho_" + _r(36))
_add("github_fine_grained", "pat {s}", "github_pat_" + _r(22) + "_" + _r(59))
_add("gitlab", "gitlab {s}", "glpat-" + _r(20, _AN + "-_"))
_add("slack_bot", "slack {s}", "xoxb-" + _r(12, string.digits) + "-" + _r(24))
_add("slack_user", "slack {s}", "xoxp-" + _r(12, string.digits) + "-" + _r(24))
_add("slack_app", "slack {s}", "xapp-1-" + _r(30))
_add(
    "slack_webhook",
    "post to https://hooks.slack.com/services/{s}",
    "T" + _r(8, string.ascii_uppercase) + "/B" + _r(8, string.ascii_uppercase) + "/" + _r(24),
)
_add("discord_webhook", "https://discord.com/api/webhooks/{s}", _r(18, string.digits) + "/" + _r(68, _AN + "-_"))
_add("google_api", "maps key {s}", "AIza" + _r(35, _AN + "-_"))
_add("google_oauth", "access {s}", "ya29." + _r(60, _AN + "-_"))
_add("google_refresh", "refresh {s}", "1//0" + _r(60, _AN + "-_"))
_add("triage_key", "our key {s}", "trg_" + _r(8) + "_" + _r(32))
_add("sendgrid", "sg {s}", "SG." + _r(22, _AN + "-_") + "." + _r(43, _AN + "-_"))
_add("npm", "npm {s}", "npm_" + _r(36))
_add("pypi", "pypi {s}", "pypi-AgEIcHlwaS5vcmc" + _r(60, _AN + "-_"))
_add("huggingface", "hf {s}", "hf_" + _r(34))
_add("mailgun", "mg {s}", "key-" + _r(32, "0123456789abcdef"))
_add("shopify", "shop {s}", "shpat_" + _hex(32))
_add("digitalocean", "do {s}", "dop_v1_" + _hex(64))
_add("twilio", "twilio {s}", "SK" + _hex(32))
_add("telegram", "bot " + _r(9, string.digits) + ":{s}", "AA" + _r(33, _AN + "-_"))  # the bot id is public
_add("age", "age {s}", "AGE-SECRET-KEY-1" + _r(58, string.ascii_uppercase + string.digits))
_add("vault", "vault {s}", "hvs." + _r(90, _AN + "-_"))
_add("linear", "linear {s}", "lin_api_" + _r(40))
_add("notion", "notion {s}", "secret_" + _r(43))
_add("atlassian", "jira {s}", "ATATT3" + _r(60, _AN + "-_="))
_add("postman", "postman {s}", "PMAK-" + _r(24, "0123456789abcdef") + "-" + _r(34, "0123456789abcdef"))
_add("supabase", "sb {s}", "sbp_" + _hex(40))
_add("databricks", "db {s}", "dapi" + _hex(32))
_add("groq", "groq {s}", "gsk_" + _r(52))
_add("replicate", "r8 {s}", "r8_" + _r(37))
_add("square", "square {s}", "sq0atp-" + _r(22, _AN + "-_"))
_add("jwt_bare", "session {s} expires", _jwt)
_add("bearer", "Authorization: Bearer {s}", _r(32, _AN + "-._~"))
_add("basic_auth", "Authorization: Basic {s}", _basic)
_add("cookie", "Cookie: session={s}; theme=dark", _r(32))
_add("set_cookie", "Set-Cookie: sid={s}; Path=/; HttpOnly", _r(32))
_add("url_password", "connect postgres://app:{s}@db.internal:5432/prod", _r(16))
_add("password_assign", "login with password={s} please", _r(14))
_add("password_json", '{{"user": "ann", "password": "{s}"}}', _r(14) + " " + _r(6))
_add("client_secret_raw_args", '{{"client_id": "abc", "client_secret": "{s}", "scope": ', _r(30))
_add("private_key_json", '{{"type": "service_account", "private_key": "{s}"}}', _r(40))
_add(
    "pem_private_key",
    "key:\n-----BEGIN RSA PRIVATE KEY-----\n{s}\n-----END RSA PRIVATE KEY-----\nthanks",
    _pem_body,
)
_add("pem_cut", "key: -----BEGIN PRIVATE KEY-----\n{s}", _pem_body[:150])
_add("email", "write to {s} today", "ann.lee+test@example.co.uk")
_add("visa", "card {s} exp 12/29", _luhn_complete("4", 16))
_add("mastercard_spaced", "pay with {s}", " ".join([_luhn_complete("52", 16)[i : i + 4] for i in range(0, 16, 4)]))
_add("amex", "amex {s}", _luhn_complete("37", 15))
_add("ssn", "SSN: {s}", "123-45-6789")

#: text that must come out of redaction unchanged
LOOKALIKES: list[str] = [
    "request 123e4567-e89b-12d3-a456-426614174000 done",
    "md5 9e107d9d372bb6826bd81d3542a419d6",
    "sha1 da39a3ee5e6b4b0d3255bfef95601890afd80709",
    "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "commit 1b1d906ab3c4e5f60718293a4b5c6d7e8f901234 on main",
    "order ORD-2024-000123 shipped",
    "invoice INV-2026-11-0042, PO-778812, #1002345",
    "amazon order 112-3456789-1234567",
    "version 1.2.3, v2.10.0-rc.1+build.77, 2026.11.30",
    "pydantic==2.9.2 torch 2.13.0",
    "on 2024-01-15 at 10:42:07Z",
    "call +1 415 555 0100 or 415-555-0100",
    "ip 192.168.1.10:8080 and ::1",
    "the task-1234 and skill-level sk-short",
    "max_tokens: 4096, tokens_in=812, token_count=12",
    "Basic information and basic plan",
    "the bearer of bad news",
    "see https://example.com/path?query=1#frag",
    "decorator @app.route and @pytest.fixture",
    "a cookie: chocolate chip",
    "the password field is required",
    "path /usr/local/lib/python3.11/site-packages/x.py",
    "base64 image aGVsbG8gd29ybGQ=",
    "tracking 1Z999AA10123456784",
    "isbn 978-3-16-148410-0",
    "[REDACTED:api_key] stays as it is",
]

"""Redaction: each rule, hash mode, configurable rules, JSON walking, the secret corpus (every
format out, every look-alike kept), and the adversarial shapes of bench/redaction.py (correct at
every size; their timing is the benchmark's)."""

from __future__ import annotations

import pytest

from bench.redaction import ADVERSARIAL, DENSE
from model.core.schema import Step, Trace
from serve.redaction import RULES, RedactionMode, Redactor
from tests.secret_corpus import LOOKALIKES, SECRETS


def leaked(secret: str, text: str, width: int = 8) -> list[str]:
    """Pieces of ``secret`` (``width`` characters, no whitespace) still in ``text``."""
    pieces = {secret[i : i + width] for i in range(max(1, len(secret) - width + 1))}
    return sorted(p for p in pieces if not any(c.isspace() for c in p) and p in text)


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
        ("Authorization: Basic dXNlcjpwYXNz", "Authorization: Basic [REDACTED:basic_auth]"),
        ("Cookie: sid=abc123; theme=dark", "Cookie: [REDACTED:cookie]"),
        ("card 4111 1111 1111 1111 exp", "card [REDACTED:card] exp"),
        ("card 4111 1111 1111 1112 exp", "card 4111 1111 1111 1112 exp"),  # Luhn fails
        ("ssn 123-45-6789.", "ssn [REDACTED:ssn]."),
        ("ssn 000-45-6789 666-12-3456", "ssn 000-45-6789 666-12-3456"),  # never issued
        ("a@b.com@c.com x", "[REDACTED:email] x"),
        ("@app.route('/x')", "@app.route('/x')"),
    ],
)
def test_each_rule(text: str, expected: str) -> None:
    assert Redactor().redact_text(text) == expected


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_secret_corpus_is_redacted(name: str) -> None:
    text, secret = SECRETS[name]
    out = Redactor().redact_text(text)
    assert not leaked(secret, out), out
    hashed = Redactor(mode="hash", salt="s").redact_text(text)
    assert not leaked(secret, hashed), hashed


@pytest.mark.parametrize("text", LOOKALIKES)
def test_lookalikes_survive(text: str) -> None:
    assert Redactor().redact_text(text) == text


def test_secrets_inside_json_values_keys_and_raw_arguments() -> None:
    _, key = SECRETS["stripe_live"]
    _, aws = SECRETS["aws_secret_bare"]
    value = {
        "headers": {"Authorization": "Basic dXNlcjpwYXNz", "Cookie": "a=b", "Accept": "json"},
        "tool_args": {"password": "pw", "user": "a@b.io", "n": 3, "max_tokens": 4096},
        "list": ["Bearer abcdefgh12345678", True, None],
        "aws_secret_access_key": aws,
        "private_key": "-----BEGIN PRIVATE KEY-----\nABCD",
        key: "a key as a key",
    }
    out = Redactor().redact(value)
    assert out["headers"] == {"Authorization": "[REDACTED:api_key]", "Cookie": "[REDACTED:api_key]", "Accept": "json"}
    assert out["tool_args"] == {"password": "[REDACTED:api_key]", "user": "[REDACTED:email]", "n": 3, "max_tokens": 4096}
    assert out["list"] == ["Bearer [REDACTED:bearer]", True, None]
    assert out["aws_secret_access_key"] == out["private_key"] == "[REDACTED:api_key]"
    assert "[REDACTED:api_key]" in out and key not in str(out)
    assert Redactor().redact(out) == out  # idempotent: stored text can be redacted again


def test_redact_trace_keeps_ids_and_unchanged_steps() -> None:
    _, key = SECRETS["github_classic"]
    trace = Trace(
        id="ann@example.com",
        session_id="s:1",
        metadata={"note": f"uses {key}"},
        steps=[
            Step(kind="user_input", content="hello there"),
            Step(kind="tool_call", tool_name="auth", tool_args_raw='{"client_secret": "abcdefgh1234'),
        ],
    )
    out = Redactor().redact_trace(trace)
    assert (out.id, out.session_id) == ("ann@example.com", "s:1")
    assert out.steps[0] is trace.steps[0]
    assert out.steps[1].tool_args_raw == '{"client_secret": "[REDACTED:api_key]'
    assert key not in out.model_dump_json() and key in trace.model_dump_json()


def test_hash_mode_is_stable_and_salted() -> None:
    a = Redactor(mode="hash", salt="one")
    b = Redactor(mode="hash", salt="two")
    x = a.redact_text("mail bob@example.com and bob@example.com")
    assert x.count("[email:") == 2 and "bob@" not in x
    first, second = x.split(" and ")
    assert first.removeprefix("mail ") == second  # equal secrets stay equal
    assert a.redact_text("bob@example.com") != b.redact_text("bob@example.com")
    assert a.redact_text(x) == x


def test_hash_mode_hashes_a_lone_surrogate() -> None:
    """A Python str may hold a lone surrogate (JSON's \\ud800 escape); hashing it must not raise, and
    different secrets keep different tokens."""
    r = Redactor(mode="hash", salt="s\ud800")
    one, two = r.redact({"password": "ab\ud800cd"}), r.redact({"password": "ab\udc00cd"})
    assert one["password"].startswith("[") and "ab" not in one["password"]
    assert one != two and r.redact({"password": "ab\ud800cd"}) == one


def test_rules_are_configurable() -> None:
    only_email = Redactor.from_names(["email"])
    assert only_email.redact_text("bob@example.com sk-abcdefghijklmnopqrstuvwx") == (
        "[REDACTED:email] sk-abcdefghijklmnopqrstuvwx"
    )
    none = Redactor.from_names([""])
    assert not none.enabled and none.redact({"password": "x"}) == {"password": "x"}
    with pytest.raises(ValueError, match="unknown redaction rules"):
        Redactor.from_names(["phone"])
    assert set(RULES) == {"api_key", "bearer", "url_password", "email", "card", "ssn"}


@pytest.mark.parametrize("size", [64, 1000, 20_000])
@pytest.mark.parametrize("shape", sorted(ADVERSARIAL))
def test_adversarial_shapes_stay_correct(shape: str, size: int) -> None:
    """A secret after the hostile filler is still found, and the filler is kept as it was (or,
    where the filler itself is secret-shaped, redacted the same way a short piece of it is)."""
    filler = ADVERSARIAL[shape](size)
    r = Redactor()
    text, secret = SECRETS["openai"]
    out = r.redact_text(filler + "\n" + text)
    assert not leaked(secret, out)
    if shape != "pem_body_no_end":  # a private key without its end line is redacted to the end
        assert out.endswith("\n" + r.redact_text(text))
    assert r.redact_text(out) == out


def test_dense_inputs_redact_every_secret() -> None:
    out = Redactor().redact_text(DENSE["emails"](10_000))
    assert "@" not in out and out.count("[REDACTED:email]") == 10_000 // len("bob@example.com ")
    cards = Redactor().redact_text(DENSE["cards"](10_000))
    assert "4111" not in cards


def _long_texts() -> dict[str, str]:
    """Texts over the RE2 pre-scan's threshold: the corpus and its look-alikes after prose, each
    secret in upper and mixed case too (the lower-cased rules), and each adversarial shape."""
    prose = ADVERSARIAL["prose"](70_000)
    corpus = "\n".join(t for t, _ in SECRETS.values())
    texts = {
        "corpus": prose + "\n" + corpus,
        "lookalikes": prose + "\n" + " | ".join(LOOKALIKES),
        "corpus_upper": prose + "\n" + corpus.upper(),
        "corpus_title": prose + "\n" + corpus.title(),
        "surrogate": prose + "\ud800 " + corpus,  # no UTF-8 for RE2: every anchor is tested
    }
    for shape, make in ADVERSARIAL.items():
        if shape != "basic_words":  # a flood of Basic anchors, masked whole by design (its own test)
            texts[shape] = make(70_000) + "\n" + corpus
    return texts


@pytest.mark.parametrize("name", sorted(_long_texts()))
def test_long_texts_pre_scanned_by_re2_redact_exactly_as_short_ones(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above ``_LONG`` characters one RE2 pass decides which patterns run, and the bulk path runs
    them; the result is the one every pattern gives on the short-text path (forced by raising
    the threshold)."""
    import serve.redaction._redactor as redaction

    text = _long_texts()[name]
    assert len(text) > redaction._LONG
    long_out = Redactor().redact_text(text)
    monkeypatch.setattr(redaction, "_LONG", 10**9)
    assert Redactor().redact_text(text) == long_out
    if name == "corpus":
        for _, secret in SECRETS.values():
            assert not leaked(secret, long_out), secret
    if name == "lookalikes":
        assert long_out == text


#: Edge cases of each rule where the bulk path's patterns and numpy checks are cut differently
#: from the exact path's (they must still agree): e-mail domains of one and many labels, a domain
#: followed by a dot or a digit label, local parts longer than 64; assignments quoted, single-
#: quoted, with backslashes, unclosed, over 4096 characters, a quote before the separator, our own
#: tokens; headers with 1, 8 and 9 blanks; cards of each network and length, Luhn failures; SSNs
#: at the edges of the issued ranges; AWS runs of 39, 40, 41, one case only; runs of 20+ digits.
_EDGES: tuple[str, ...] = (
    "bob@example.com", "bob@example.com.", "x@a.bc.1", "x@a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.io",
    "a@b.com@c.com", "@app.route", "me@host-1.example.co.uk!", "q@" + "a" * 70 + ".com",
    "l" * 80 + "@mail.example.org", "a.b%c+d-e@x.io", "mail:bob@ex.ample",
    *(c * k + "@x.io" for c, k in zip("efgh", (8, 9, 64, 65), strict=True)),
    'password="hunter22"', "password='single q'", 'password="with \\" escape"', 'password="unclosed',
    'password="' + "p" * 5000 + '"', "pass_phrase := abcd1234", 'passwd"=x1y2z3w4', "token: [REDACTED:api_key]",
    'secret_key="[api_key:0123456789ab]"', "api-key=ABCDEFGH", "access_key=QWERTYUI; x", "credentials:  k3y5v4lu3",
    'connection_string="Server=x;Pwd=y"', "privatekey = zzzzzzzz", 'password=""', "password = \t 'x'",
    "Bearer abcdefgh12345678", "bearer\t\t" + "t" * 12, "Bearer" + " " * 8 + "abcdefgh1234", "Bearer" + " " * 9 + "abcdefgh1234",
    "Basic dXNlcjpwYXNz", "basic  YWxpY2U6c2VjcmV0MTIz==", "Basic dXNlcj", "Basic w6k6", "Basic dXNlcjpwYXNz=x",
    "Cookie: sid=abc123; theme=dark", "set-cookie :  a=b", "cookie:x",
    "4111 1111 1111 1111", "4111-1111-1111-1111", "4111111111111111", "4111 1111 1111 1112", "378282246310005",
    "3782 822463 10005", "6011111111111117", "3530111333300000", "30569309025904", "5555555555554444",
    "2223003122003222", "6200000000000005", "4222222222222", "4111 1111 1111 1111 111", "12345678901234567890123",
    "1234 5678 9012 3456 7890", "0" * 25 + " 4111111111111111",
    "123-45-6789", "000-45-6789", "666-12-3456", "900-12-3456", "123-00-6789", "123-45-0000", "1123-45-6789",
    "A" * 20 + "b" * 10 + "1" * 10, "Ab1" * 13, "Ab1" * 13 + "x", "a" * 40, "Zz9/" * 10, "x" + "Ab1+" * 10,
    "postgres://bob:s3cr3t@db:5432/x", "https://x:y@h", "h://a:b:c@d", "sk-" + "a" * 16, "sk-short",
    "https://hooks.slack.com/services/T000/B000/XXXXXXXX", "eyJhbGciOi.eyJzdWIiOi.sig", "ghp_" + "a" * 36,
    "-----BEGIN RSA PRIVATE KEY-----\nQUJD\n-----END RSA PRIVATE KEY-----", "123456789:AA" + "b" * 30,
    "naïve café 東京 \u00a0 ", "\u2028", "é@x.io", "pässword=abcdefgh",
)


def _mixed_texts(seed: int, n: int) -> list[str]:
    """``n`` seeded texts over the bulk threshold: the corpus, the look-alikes and the edge cases
    in random order and case, joined by random separators, with prose between."""
    import random

    rng = random.Random(seed)
    pieces = [t for t, _ in SECRETS.values()] + list(LOOKALIKES) + list(_EDGES)
    seps = [" ", "\n", ", ", '"', "'", "\t", ":", "=", "; ", "", "  ", "(", ")", "é", "/", "@", "-"]
    prose = ADVERSARIAL["prose"](2000)
    texts = []
    for _ in range(n):
        out: list[str] = []
        while sum(map(len, out)) < 70_000:
            piece = rng.choice(pieces)
            piece = rng.choice([piece, piece, piece.upper(), piece.title()])
            out.append(rng.choice(seps) + piece + rng.choice(seps))
            if rng.random() < 0.05:
                out.append(prose[: rng.randrange(2000)])
        texts.append("".join(out))
    return texts


@pytest.mark.parametrize("mode", ["mask", "hash"])
@pytest.mark.parametrize("seed", range(4))
def test_bulk_path_redacts_mixed_texts_exactly_as_the_exact_path(
    seed: int, mode: RedactionMode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Texts over ``_LONG`` characters take the bulk path (spans from ``split``, checks and merge
    in numpy, an ASCII text masked in numpy); the result is the exact path's, text for text."""
    import serve.redaction._redactor as redaction

    r = Redactor(mode=mode, salt="s")
    texts = _mixed_texts(seed, 3)
    texts.append(texts[0].encode("ascii", "replace").decode())  # an ASCII one: masked in numpy
    bulk = [r.redact_text(t) for t in texts]
    monkeypatch.setattr(redaction, "_LONG", 10**9)
    assert [r.redact_text(t) for t in texts] == bulk
    assert bulk[-1] != texts[-1]


@pytest.mark.parametrize("rules", [["email"], ["card", "ssn"], ["bearer"], ["api_key"], ["url_password", "email"]])
def test_bulk_path_with_some_rules_off(rules: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import serve.redaction._redactor as redaction

    r = Redactor.from_names(rules)
    texts = _mixed_texts(7, 2)
    bulk = [r.redact_text(t) for t in texts]
    monkeypatch.setattr(redaction, "_LONG", 10**9)
    assert [r.redact_text(t) for t in texts] == bulk


def test_a_flood_of_basic_anchors_is_masked_whole_and_ordinary_text_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """More than ``_FLOOD`` ``Basic`` anchors, one per 256 characters or denser, are a flood: every
    base64 run after one is masked (the coarse pass), credentials or not. Every credential the
    exact path finds is gone; what the flood loses is its look-alikes (``Basic dXNlcj``, which
    decodes to no ``user:password``). Below the density the exact check runs."""
    import serve.redaction._redactor as redaction
    from serve.redaction import _bulk as bulk

    _, creds = SECRETS["basic_auth"]
    unit = f"Authorization: Basic {creds}\nBasic dXNlcj and Basic setup, basically\n"
    flood = unit * (bulk._FLOOD // 3 + 100)
    out = Redactor().redact_text(flood)
    assert creds not in out and "dXNlcj" not in out and "setup" not in out
    assert out.count("[REDACTED:basic_auth]") == 3 * flood.count("Authorization")
    assert "basically" in out  # no blank after the word: no anchor
    monkeypatch.setattr(redaction, "_LONG", 10**9)
    exact = Redactor().redact_text(flood)
    assert creds not in exact and "Basic dXNlcj and Basic setup" in exact  # the exact path keeps them
    monkeypatch.undo()
    sparse = ADVERSARIAL["prose"](300) + unit  # one unit per ~400 characters: not a flood
    text = sparse * (70_000 // len(sparse) + 1)
    out = Redactor().redact_text(text)
    assert creds not in out and "Basic dXNlcj and Basic setup" in out


def test_bulk_path_on_floods_of_each_shape_matches_the_exact_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The dense inputs of bench/redaction.py (and every adversarial shape but the Basic flood,
    masked whole by design), at 200 KB, and the dense ones with non-ASCII characters (a lone
    surrogate, an astral one, U+10FFFF): the bulk path's output is the exact path's."""
    import serve.redaction._redactor as redaction

    texts = {name: make(200_000) for name, make in {**ADVERSARIAL, **DENSE}.items() if name != "basic_words"}
    for name, make in DENSE.items():  # not ASCII: the output is rebuilt from UTF-32
        texts[f"{name}_unicode"] = "é😀\ud800 " + make(200_000) + " ü\U0010ffff\x11"
    r = Redactor()
    bulk = {name: r.redact_text(t) for name, t in texts.items()}
    monkeypatch.setattr(redaction, "_LONG", 10**9)
    for name, t in texts.items():
        assert r.redact_text(t) == bulk[name], name

"""Redaction of secrets and personal data, in linear time, before anything is stored or answered.

Every trace is redacted *before* it is diagnosed (so evidence, which the detectors cut to a few
hundred characters, is cut from redacted text and never ends in a key's prefix), and what is
stored or answered — the trace, the diagnosis, the recommendation, the repair-policy state,
outcome notes — passes through a :class:`Redactor`.

This package's ``__all__`` is its whole interface (httpx's layout): the modules behind it are private
— ``_patterns`` (the rules' expressions), ``_scan`` (the exact path), ``_bulk`` (the numpy path for long
texts), ``_redactor`` (:class:`Redactor`) — and share their names with each other only.

Rules (each can be switched off by name, setting ``TRIAGE_REDACT``):

``api_key``
    Well-known key shapes (OpenAI / Anthropic ``sk-…``, Stripe ``sk_live_`` / ``rk_live_`` /
    ``whsec_``, AWS ``AKIA…`` ids and bare 40-character secret keys, GitHub ``ghp_…`` /
    ``github_pat_…``, GitLab ``glpat-…``, Slack ``xox?-…`` tokens and webhook URLs, Google
    ``AIza…`` / ``ya29.…``, SendGrid, npm, PyPI, Hugging Face, Shopify, DigitalOcean, Vault, …,
    our own ``trg_…``), JSON Web Tokens, PEM private keys, and the value of ``password=…`` /
    ``"client_secret": "…"``-like assignments in text. A JSON value stored under a sensitive key
    (``password``, ``private_key``, ``aws_secret_access_key``, ``authorization``, ``cookie`` …) is
    replaced whole.
``bearer``
    ``Bearer <token>``, ``Basic <base64 user:password>`` and ``Cookie:`` / ``Set-Cookie:`` headers.
``url_password``
    ``scheme://user:PASSWORD@host``.
``email``
    E-mail addresses.
``card``
    Payment-card numbers (a card network's prefix and length, Luhn check digit).
``ssn``
    US social security numbers (``123-45-6789``, the ranges the SSA issues).

Look-alikes survive: UUIDs, hex digests, order and version numbers fail every shape above.

Linear time: every pattern can only start where its anchor starts (a literal prefix, or a
look-behind that forbids starting inside a run of the characters it consumes), every repetition
after an anchor is possessive or bounded, and no repetition may run across the next anchor. So no
input makes the regex engine backtrack: a string of *n* characters costs O(n) per rule
(``bench/redaction.py`` measures adversarial inputs up to the 5 MiB body limit).

Two paths, one result. A text of at most 64 KiB (``_LONG``: nearly every string of a trace) takes
the exact path: each pattern's matches, the checks after a match in Python, a merge of tuples. A
longer one takes the bulk path, built so that the engine's C loop does the work per match and
numpy the rest: which rules to run comes from one pass of an RE2 set over the literal anchors;
each pattern's matches come out of one ``split`` as the lengths of its pieces (no match object,
no span tuple; a header's or an assignment's value start is then found in numpy); an e-mail's
local part, a card's network and Luhn digit, an SSN's ranges and an AWS key's mixed case are
checked in numpy over all candidates at once; spans are merged in numpy (same groups, same
labels); a mask-mode text with more than 2,000 secrets is rebuilt in numpy. ``tests/test_redaction.py`` checks that
both paths give the same text on seeded mixed texts (the corpus, the look-alikes, edge cases of
every rule, in three cases, both modes, rules switched off) and on every adversarial and dense
shape (ASCII and not).

Floods (the one place the paths differ): a text holding more than 4,096 ``basic`` anchors (any
case), one per 256 characters or denser, is a flood of ``Basic`` candidates; its values are
masked by a coarse numpy pass, every base64 run after ``basic`` and 1–8 blanks, without decoding
each to see whether it is ``user:password``. Every credential the exact check finds is such a
run (the same span), so none survives; what the flood loses is its look-alikes: ``Basic setup``
or ``Basic dXNlcj`` (no colon) are masked too. Texts below that density (ordinary text) get the
exact check. No other rule has a coarse pass: a flood of card-shaped numbers, e-mail-like
versions (``pkg@1.2.3``) or order numbers is ordinary text (a CSV, a lockfile), so every card
candidate gets its Luhn and network check, every domain the full pattern.

Speed (``.venv/bin/python bench/redaction.py --dense --clock cpu``, 5 MiB, CPU ms, the shared
2-core machine at load 4, 2026-12-01 15:10 UTC; before → after this path): prose 25 → 29, JSON-like
32 → 27; near-miss shapes 24–73 → 7–49; ``'Basic dXNlcj '*n`` 302 → 64 (the coarse pass),
``'password="'*n`` 257 → 87, ``'4111 '*n`` 387 → 79; back-to-back JWTs 105 → 43; dense e-mails,
keys, cards 365 → 89, 136 → 62, 509 → 98. Every shape at every size ≤ 100 ms; the floods are close
to it (81–98 ms in five runs, once 100.6). Hash mode computes one HMAC per distinct secret in
Python: its dense floods cost 124–212 ms (``--mode hash``); a mask-mode flood that is not ASCII
is rebuilt from UTF-32 (dense e-mails 103 ms). ``docs/benchmarks.md`` has the table.

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

from serve.redaction._patterns import RULES
from serve.redaction._redactor import RedactionMode, Redactor

__all__ = ["RULES", "RedactionMode", "Redactor"]

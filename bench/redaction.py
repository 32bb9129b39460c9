"""Redaction under adversarial inputs: the time to redact one string, by shape and size.

Every shape is built to make a backtracking regex go quadratic (issue 15: ``'a.'*100000 + '@'``
took 42 s), or to make a rule try a match at every position. Sizes run up to the service's body
limit (5 MiB). Prints one line per shape: the time at each size and the largest.

    .venv/bin/python bench/redaction.py            # all shapes, sizes 1 KiB … 5 MiB
    .venv/bin/python bench/redaction.py --dense    # also inputs that are nothing but secrets
    .venv/bin/python bench/redaction.py --clock cpu   # CPU time instead of wall time (loaded machine)
    .venv/bin/python bench/redaction.py --shapes prose --sizes 2048 16384 60000   # ordinary text, exact path
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from serve.redaction import Redactor

LIMIT = 5 * 1024 * 1024
SIZES = (1024, 16 * 1024, 256 * 1024, 1024 * 1024, LIMIT)


def _fill(unit: str, size: int, head: str = "", tail: str = "") -> str:
    body = size - len(head) - len(tail)
    return head + (unit * (body // len(unit) + 1))[: max(0, body)] + tail


#: name → builder(size) of an adversarial string of about ``size`` characters. Module-level so the
#: tests (tests/test_redaction.py) run the same shapes for correctness.
ADVERSARIAL: dict[str, Callable[[int], str]] = {
    "email_local_dots": lambda n: _fill("a.", n, tail="@"),
    "email_at_runs": lambda n: _fill("a@", n),
    "email_domain_no_tld": lambda n: _fill("a.", n, head="x@", tail="."),
    "email_domain_digits": lambda n: _fill("a1.", n, head="bob@", tail="9"),
    "ats": lambda n: "@" * n,
    "url_scheme_then_password": lambda n: _fill("a.", n // 2, tail="://x:") + "y" * (n // 2),
    "url_repeated_scheme": lambda n: _fill("a://", n),
    "url_user_colons": lambda n: _fill("x:", n, head="h://"),
    "url_no_at": lambda n: _fill("p", n, head="postgres://bob:"),
    "sk_prefixes": lambda n: _fill("sk-", n),
    "sk_short_bodies": lambda n: _fill("sk-" + "a" * 15 + " ", n),
    "key_prefixes_mixed": lambda n: _fill("ghp_glpat-xoxb-AKIAya29.hf_npm_", n),
    "bearer_words": lambda n: _fill("bearer ", n),
    "bearer_spaces": lambda n: _fill(" ", n, head="Bearer ", tail="x"),
    "basic_words": lambda n: _fill("Basic dXNlcj ", n),
    "cookie_headers": lambda n: _fill("cookie:", n),
    "cookie_no_equals": lambda n: _fill("a", n, head="Cookie: "),
    "password_unclosed_quote": lambda n: _fill("a", n, head='password="'),
    "password_repeated": lambda n: _fill("password:", n),
    "password_quotes": lambda n: _fill('password="', n),
    "assign_spaces": lambda n: _fill("token" + " " * 20, n),
    "pem_dashes": lambda n: _fill("-", n, head="-----BEGIN RSA PRIVATE KEY-----"),
    "pem_begins": lambda n: _fill("-----BEGIN ", n),
    "pem_body_no_end": lambda n: _fill("QUJD", n, head="-----BEGIN PRIVATE KEY-----\n"),
    "jwt_headers": lambda n: _fill("eyJ", n),
    "jwt_two_parts": lambda n: _fill("eyJhbGciOi.", n),
    "digits": lambda n: "4" * n,
    "digit_groups": lambda n: _fill("4111 ", n),
    "digit_dashes": lambda n: _fill("4-", n),
    "ssn_like": lambda n: _fill("123-45-", n),
    "base64_run": lambda n: _fill("Aa1/", n),
    "base64_41": lambda n: _fill("Aa1" * 13 + "xx ", n),
    "telegram_digits": lambda n: _fill("1", n, tail=":AA"),
    "slack_hooks": lambda n: _fill("https://hooks.slack.com/services/", n),
    "json_like": lambda n: _fill('{"key": "value", "n": 12, "list": [1, 2, 3]}, ', n),
    "prose": lambda n: _fill("The order ORD-2024-000123 shipped on 2024-01-15 (v1.2.3). ", n),
}

#: inputs that are nothing but secrets: linear too, but every match costs a replacement.
DENSE: dict[str, Callable[[int], str]] = {
    "emails": lambda n: _fill("bob@example.com ", n),
    "keys": lambda n: _fill("sk-abcdefghijklmnopqrstuvwx ", n),
    "cards": lambda n: _fill("4111 1111 1111 1111 ", n),
}


def time_one(
    redactor: Redactor, text: str, repeat: int = 3, clock: Callable[[], float] = time.perf_counter
) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = clock()
        redactor.redact_text(text)
        best = min(best, clock() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dense", action="store_true", help="also time inputs made only of secrets")
    ap.add_argument("--mode", choices=["mask", "hash"], default="mask")
    ap.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="wall: elapsed time; cpu: this process's CPU time (what the redaction costs, without the "
        "time other processes hold the cores: use it on a loaded machine)",
    )
    ap.add_argument("--shapes", nargs="+", default=None, help="only these shapes (default: all)")
    ap.add_argument("--sizes", nargs="+", type=int, default=list(SIZES), help="input sizes in characters")
    args = ap.parse_args()
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    r = Redactor(mode=args.mode, salt="bench")
    shapes = dict(ADVERSARIAL)
    if args.dense:
        shapes.update({f"dense_{k}": v for k, v in DENSE.items()})
    if args.shapes:
        shapes = {k: v for k, v in shapes.items() if k in args.shapes}
    sizes = tuple(args.sizes)
    print(f"redaction ({args.mode} mode), best of 3, {args.clock} milliseconds by input size")
    print(f"{'shape':28s}" + "".join(f"{s:>10d}" for s in sizes))
    worst = ("", 0.0)
    over: list[str] = []
    for name, make in shapes.items():
        row = []
        for size in sizes:
            t = time_one(r, make(size), clock=clock)
            row.append(t)
            if size == LIMIT and t > worst[1] and not name.startswith("dense_"):
                worst = (name, t)
            if t > 0.1 and name not in over:
                over.append(name)
        print(f"{name:28s}" + "".join(f"{t * 1000:10.3f}" for t in row))
    if LIMIT in sizes:
        print(f"slowest adversarial shape at {LIMIT // 1024} KiB: {worst[0]} {worst[1] * 1000:.1f} ms")
    print(f"shapes over 100 ms at some size: {', '.join(over) or 'none'}")


if __name__ == "__main__":
    main()

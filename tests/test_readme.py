"""The README's request and answer are the service's: its request runs through the real app.

The README sends ``docs/examples/ignored_error.json`` to ``POST /v1/diagnose`` and shows the answer
through a ``jq`` projection (the fields a reader looks at first). This test sends the same body to the
app (``serve.app.create_app``, the shipped models, a fresh SQLite store), applies the same projection
and compares it with the JSON block between the README's two markers. When the service's answer
changes, regenerate the block (from the repository root)::

    make readme                                  # or: .venv/bin/python -m tests.test_readme --write
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
REQUEST = ROOT / "docs" / "examples" / "ignored_error.json"
START, END = "<!-- readme-answer:start -->", "<!-- readme-answer:end -->"
BLOCK = re.compile(re.escape(START) + r"\n```json\n(.*?)\n```\n" + re.escape(END), re.DOTALL)
REGENERATE = "make readme (or .venv/bin/python -m tests.test_readme --write) rewrites it"


def project(answer: dict[str, Any]) -> dict[str, Any]:
    """The README's ``jq`` filter, in Python: keep it in step with the command the README shows."""
    return {
        "healthy": answer["healthy"],
        "primary": (answer["primary"] or {}).get("kind"),
        "failures": [
            {key: failure[key] for key in ("kind", "step", "confidence", "severity")}
            for failure in answer["failures"]
        ],
        "recommendation": {key: answer["recommendation"][key] for key in ("strategy", "instruction")},
    }


def service_answer() -> dict[str, Any]:
    """The projection of what the app answers to the README's request (shipped models, auth off)."""
    from fastapi.testclient import TestClient

    from serve.app import create_app
    from serve.settings import Settings

    with tempfile.TemporaryDirectory() as data_dir:
        settings = Settings(data_dir=Path(data_dir), auth="off")
        with TestClient(create_app(settings)) as client:
            r = client.post("/v1/diagnose", content=REQUEST.read_bytes(), headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    return project(r.json())


def render(projection: dict[str, Any]) -> str:
    """The block as ``jq`` prints it (two-space indent, non-ASCII kept)."""
    return json.dumps(projection, indent=2, ensure_ascii=False)


def readme_block(text: str) -> str:
    found = BLOCK.search(text)
    assert found is not None, f"README.md has no ```json block between {START} and {END}"
    return found.group(1)


def test_readme_answer_is_the_services() -> None:
    shown = json.loads(readme_block(README.read_text(encoding="utf-8")))
    assert shown == service_answer(), f"the README's answer differs from the service's: {REGENERATE}"


def test_readme_shows_the_request_it_checks() -> None:
    text = README.read_text(encoding="utf-8")
    assert f"@{REQUEST.relative_to(ROOT)}" in text, "the README's curl must send the request this test sends"


def write() -> None:
    text = README.read_text(encoding="utf-8")
    readme_block(text)  # fails with the markers' names when they are missing
    new = BLOCK.sub(lambda _: f"{START}\n```json\n{render(service_answer())}\n```\n{END}", text)
    README.write_text(new, encoding="utf-8")
    print("README.md: answer " + ("unchanged" if new == text else "rewritten"))


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.test_readme --write")
    write()

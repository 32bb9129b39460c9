"""The house's shape: no module over 600 lines outside tests unless the allow-list says why.

The allow-list is ``[tool.triage.long-modules]`` in pyproject.toml: ``"path" = "one line of reason"``,
at most three entries, each naming a module that exists and is still over the limit (a stale entry
fails, so the list only shrinks). The layering itself (routers → services → store, serving never
importing training, no cycles) is import-linter's, in ``make lint``; :func:`test_layering_contracts`
runs it here too so that ``pytest`` alone catches a broken contract.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 600
MAX_ALLOWED = 3
# Every Python module we ship or run, except tests and the generated Alembic revisions.
SOURCES = ("model", "serve", "client/agent_triage_client", "bench", "research")


def _allow_list() -> dict[str, str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return dict(config.get("tool", {}).get("triage", {}).get("long-modules", {}))


def _modules() -> list[Path]:
    found: list[Path] = []
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if {"tests", "__pycache__", ".ipynb_checkpoints"} & set(rel.parts) or "versions" in rel.parts:
                continue
            found.append(rel)
    return found


def line_count(path: Path) -> int:
    with open(ROOT / path, encoding="utf-8") as fh:
        return sum(1 for _ in fh)


def test_the_allow_list_is_short_and_each_entry_gives_a_reason() -> None:
    allowed = _allow_list()
    assert len(allowed) <= MAX_ALLOWED, f"at most {MAX_ALLOWED} long modules may be allowed; got {sorted(allowed)}"
    for path, reason in allowed.items():
        assert isinstance(reason, str) and reason.strip() and "\n" not in reason, f"{path}: one line of reason"
        assert (ROOT / path).is_file(), f"{path} is on the allow-list but does not exist: remove it"
        assert line_count(Path(path)) > LIMIT, f"{path} is back under {LIMIT} lines: remove it from the allow-list"


def test_no_module_is_over_the_limit_unless_allowed() -> None:
    allowed = _allow_list()
    modules = _modules()
    assert len(modules) > 100, "the walk found too few modules: is SOURCES right?"
    over = {str(p): n for p in modules if (n := line_count(p)) > LIMIT and str(p) not in allowed}
    assert not over, f"modules over {LIMIT} lines (split them, or allow one in pyproject.toml with a reason): {over}"


@pytest.mark.skipif(shutil.which("lint-imports", path=str(Path(sys.executable).parent)) is None,
                    reason="import-linter is in the dev extra")
def test_layering_contracts() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert exe is not None
    done = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout, done.stdout[-2000:]

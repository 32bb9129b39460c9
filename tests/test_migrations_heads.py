"""The store's Alembic migrations (``serve/migrations/versions``) form one numbered chain with one head.

Two branches that each add "the next revision" both write ``NNNN_*.py`` revising the same parent: merged,
they give Alembic two heads (the same id twice too, with only a warning while loading), and the
service's ``upgrade head`` fails at start-up. This test names the files to renumber instead. The rule:
file ``NNNN_name.py`` defines ``revision = "NNNN"`` and revises ``NNNN - 1`` (the first revises nothing).
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest
from alembic.config import Config
from alembic.script import ScriptDirectory

from serve.store.migrate import MIGRATIONS_DIR, head_revision


def _assignments(path: Path) -> dict[str, object]:
    """The module-level ``revision`` / ``down_revision`` / ``branch_labels`` / ``depends_on`` literals."""
    found: dict[str, object] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if (isinstance(target, ast.Name) and node.value is not None
                        and target.id in ("revision", "down_revision", "branch_labels", "depends_on")):
                    found[target.id] = ast.literal_eval(node.value)
    return found


def chain_problems(versions: Path) -> list[str]:
    """What keeps the revision files in ``versions`` from being one chain 0001 → 0002 → … (empty: none)."""
    problems: list[str] = []
    by_id: dict[str, list[str]] = {}
    parents: dict[str, list[str]] = {}
    files = sorted(p for p in versions.glob("*.py") if p.name != "__init__.py")
    for path in files:
        a = _assignments(path)
        rev, down = a.get("revision"), a.get("down_revision")
        if not isinstance(rev, str):
            problems.append(f"{path.name}: no `revision = \"NNNN\"`")
            continue
        by_id.setdefault(rev, []).append(path.name)
        if not path.name.startswith(f"{rev}_"):
            problems.append(f"{path.name}: defines revision {rev!r}; name the file {rev}_….py")
        if down is not None and not isinstance(down, str):
            problems.append(f"{path.name}: down_revision {down!r} is a merge; renumber the branch instead")
            continue
        if a.get("branch_labels") or a.get("depends_on"):
            problems.append(f"{path.name}: branch_labels / depends_on are not used here")
        if rev.isdigit():
            expected = None if int(rev) == 1 else f"{int(rev) - 1:04d}"
            if down != expected:
                problems.append(f"{path.name}: revises {down!r}, expected {expected!r}")
        else:
            problems.append(f"{path.name}: revision {rev!r} is not a four-digit number")
        parents.setdefault(str(down), []).append(path.name)
    for rev, names in sorted(by_id.items()):
        if len(names) > 1:
            problems.append(f"revision {rev} is defined {len(names)} times ({', '.join(names)}): two branches "
                            "both added it; renumber the later one on top of the other")
    for down, names in sorted(parents.items()):
        if len(names) > 1:
            problems.append(f"{len(names)} revisions revise {down} ({', '.join(names)}): Alembic would have "
                            "several heads; put one on top of the other")
    numbers = sorted(int(r) for r in by_id if r.isdigit())
    if numbers != list(range(1, len(numbers) + 1)):
        problems.append(f"the revisions are not numbered 0001 … {len(numbers):04d} without gaps: {numbers}")
    return problems


def _alembic_heads(script_location: Path) -> list[str]:
    cfg = Config()
    cfg.set_main_option("script_location", str(script_location))
    return list(ScriptDirectory.from_config(cfg).get_heads())


def test_shipped_migrations_are_one_chain_with_one_head() -> None:
    versions = MIGRATIONS_DIR / "versions"
    assert chain_problems(versions) == []
    last = max(p.name.split("_", 1)[0] for p in versions.glob("[0-9]*_*.py"))
    assert _alembic_heads(MIGRATIONS_DIR) == [last] == [head_revision()]


def _copy_with(tmp_path: Path, extra: dict[str, str]) -> Path:
    """A copy of serve/migrations with extra revision files (name → (revision, down_revision))."""
    root = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, root, ignore=shutil.ignore_patterns("__pycache__"))
    for name, text in extra.items():
        (root / "versions" / name).write_text(text, encoding="utf-8")
    return root


def _revision_file(rev: str, down: str) -> str:
    return (f'"""a branch\'s revision"""\nrevision = "{rev}"\ndown_revision = "{down}"\nbranch_labels = None\n'
            "depends_on = None\n\n\ndef upgrade() -> None:\n    pass\n\n\ndef downgrade() -> None:\n    pass\n")


def test_two_branches_adding_the_next_revision_are_caught(tmp_path: Path) -> None:
    last = head_revision()
    nxt, after = f"{int(last) + 1:04d}", f"{int(last) + 2:04d}"
    # the same number twice: Alembic warns while loading and counts the id as two heads
    same = _copy_with(tmp_path / "same", {f"{nxt}_a.py": _revision_file(nxt, last),
                                          f"{nxt}_b.py": _revision_file(nxt, last)})
    problems = chain_problems(same / "versions")
    assert any(f"revision {nxt} is defined 2 times" in p for p in problems), problems
    with pytest.warns(UserWarning, match=f"Revision {nxt} is present more than once"):
        assert _alembic_heads(same) == [nxt, nxt]
    # two numbers on one parent: two heads
    fork = _copy_with(tmp_path / "fork", {f"{nxt}_a.py": _revision_file(nxt, last),
                                          f"{after}_b.py": _revision_file(after, last)})
    problems = chain_problems(fork / "versions")
    assert any(f"2 revisions revise {last}" in p for p in problems), problems
    assert any(f"{after}_b.py: revises '{last}', expected '{nxt}'" in p for p in problems), problems
    assert sorted(_alembic_heads(fork)) == [nxt, after]
    # renumbered on top of each other: one chain again
    fixed = _copy_with(tmp_path / "fixed", {f"{nxt}_a.py": _revision_file(nxt, last),
                                            f"{after}_b.py": _revision_file(after, nxt)})
    assert chain_problems(fixed / "versions") == []
    assert _alembic_heads(fixed) == [after]


@pytest.mark.parametrize("name,text,needle", [
    ("0099_x.py", _revision_file("0042", "0041"), "defines revision '0042'; name the file 0042_"),
    ("abcd_x.py", _revision_file("abcd", "0013"), "is not a four-digit number"),
])
def test_misnamed_revisions_are_caught(tmp_path: Path, name: str, text: str, needle: str) -> None:
    root = _copy_with(tmp_path, {name: text})
    assert any(needle in p for p in chain_problems(root / "versions"))

"""``triage --help`` and every command's help read as plain words; piped output keeps ids whole.

The help is walked from the command tree itself, so a command added later is checked too: no
reStructuredText (a ``:mod:`…``` role, a double backtick) leaks from a docstring, no option shows a
type placeholder such as ``<bool>``, and the command lists show each command's first sentence
whole. Then a summary and a table go through a pipe, where rich used to wrap at 80 columns and cut
a trace id in two.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from serve.cli.main import app
from serve.settings import get_settings
from tests.conftest import ROOT

runner = CliRunner()

#: A Sphinx / reStructuredText role (``:mod:`x```, ``:func:`x```, ``:class:`~a.B```) or a literal.
ROLE = re.compile(r":[a-z]+:`")
#: Python type names as placeholders: typer's rich help printed ``--help <bool>`` on every command
#: (a flag takes no value) and ``<list[str]>`` for a repeatable option. (An argument's ``<str>`` /
#: ``<path>`` after its name is typer's plain layout, and says what it is.)
PLACEHOLDER = re.compile(r"<(bool|list\[[a-z]+\]|int range|float range)>")


#: What makes rich lay out for a terminal (or a width) although the output is a pipe.
TERMINAL_ENV = ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")


def _tree(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from _tree(sub, (*path, name))


COMMANDS = list(_tree(typer.main.get_command(app)))


def test_the_walk_sees_every_group_and_its_commands() -> None:
    """The walk is the test's reach: it must find the nested commands, not only the top level."""
    names = {" ".join(p) for p in COMMANDS}
    assert {"", "diagnose", "agents", "agents rename", "model promote", "keys revoke", "datasets export",
            "label review"} <= names
    assert len(COMMANDS) >= 30


def _help(path: tuple[str, ...]) -> str:
    res = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    return res.output


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "triage")
def test_help_is_plain_words(path: tuple[str, ...]) -> None:
    text = _help(path)
    where = f"triage {' '.join(path)} --help".replace("  ", " ")
    assert not ROLE.search(text), f"{where}: a reStructuredText role: {ROLE.search(text)!r}\n{text}"
    assert "``" not in text, f"{where}: a double backtick\n{text}"
    assert not PLACEHOLDER.search(text), f"{where}: a type placeholder {PLACEHOLDER.search(text)!r}\n{text}"
    assert "Show this message and exit." in text and "Usage: " in text


@pytest.mark.parametrize("path", [p for p in COMMANDS if p == () or p[-1] in ("agents", "datasets", "keys",
                                                                                 "label", "model")],
                         ids=lambda p: " ".join(p) or "triage")
def test_command_lists_show_whole_first_sentences(path: tuple[str, ...]) -> None:
    """click cuts a command's first sentence with "..." when it is too long for an 80-column list."""
    text = _help(path)
    listed = text.split("Commands:", 1)[1].splitlines()[1:]
    assert listed, text
    cut = [line.strip() for line in listed if line.rstrip().endswith("...")]
    assert not cut, f"first sentences too long for the list (make them shorter): {cut}"


def _long_id_trace(tmp_path: Path) -> tuple[Path, str]:
    """The README's loop example, its run given an id of 100 characters."""
    body = json.loads((ROOT / "docs/examples/loop.json").read_text(encoding="utf-8"))
    trace_id = "customer-support.eu-west-1.session-2026-12-06T08:15:42Z.run-" + "7f3c9a2e5b1d4c6f8a0e" * 2
    body["trace"]["id"] = trace_id
    path = tmp_path / "run.json"
    path.write_text(json.dumps(body), encoding="utf-8")
    return path, trace_id


def test_piped_summary_keeps_the_trace_id_and_evidence_on_one_line(tmp_path: Path) -> None:
    path, trace_id = _long_id_trace(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in TERMINAL_ENV}  # a plain pipe: rich's 80 columns
    r = subprocess.run([sys.executable, "-m", "serve.cli.main", "diagnose", str(path), "--no-classifier"],
                       cwd=ROOT, env=env, capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    lines = r.stdout.decode().splitlines()
    assert any(trace_id in line for line in lines), "\n".join(lines)
    assert len(lines[0]) > 80 and lines[0].endswith(f"(trace {trace_id})"), lines[0]
    loop = next(line for line in lines if line.lstrip().startswith("loop, step 6:"))
    assert loop.rstrip().endswith('{"results": []}'), loop  # the evidence line is whole too
    # one word for one thing: the attribution is a step, as on the console's run page, and the
    # input message it came from is named as the table's "message" column names it
    assert re.search(r"most likely at step \d+ \(message \d+\)", r.stdout.decode()), r.stdout.decode()
    header = next(line for line in lines if "severity" in line)
    assert "message" in header and "src" not in header, header


def test_piped_table_is_as_wide_as_its_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``keys list`` (a rich table): a long label keeps its row on one line, the key id whole."""
    monkeypatch.setenv("TRIAGE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TRIAGE_DATABASE_URL", f"sqlite:///{tmp_path / 'triage.db'}")
    for name in TERMINAL_ENV:
        monkeypatch.delenv(name, raising=False)
    get_settings.cache_clear()
    label = "the nightly evaluation job of the customer-support agents, eu-west-1 [staging]"
    try:
        made = runner.invoke(app, ["keys", "create", "--tenant", "acme", "--label", label])
        assert made.exit_code == 0, made.output
        listed = runner.invoke(app, ["keys", "list"])
        assert listed.exit_code == 0, listed.output
    finally:
        get_settings.cache_clear()
    key_id = made.stderr.split(" id ", 1)[1].split()[0]
    row = next(line for line in listed.stdout.splitlines() if key_id in line)
    assert label in row and len(row) > 80, listed.stdout  # whole, "[staging]" not read as markup

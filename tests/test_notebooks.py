"""Every research notebook runs, small, and renders its plots.

Small size: a cell tagged ``parameters`` (papermill style) gets ``SMALL = True`` injected right
after it, and the kernel runs with ``TRIAGE_NB_SMALL=1`` for notebooks that read that instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import ROOT

RESEARCH = ROOT / "research"
NOTEBOOKS = sorted(RESEARCH.glob("*.ipynb"))
MIN_FIGURES = {"01-cusum-and-change-points.ipynb": 6, "02-real-runs.ipynb": 4, "03-failure-history.ipynb": 5,
               "04-learning-from-history.ipynb": 2}


def execute_small(path: Path, monkeypatch: pytest.MonkeyPatch) -> nbformat.NotebookNode:
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and "parameters" in cell.get("metadata", {}).get("tags", []):
            nb.cells.insert(i + 1, nbformat.v4.new_code_cell("SMALL = True  # injected by tests"))
            break
    monkeypatch.setenv("TRIAGE_NB_SMALL", "1")
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()
    return nb


def images(nb: nbformat.NotebookNode) -> int:
    return sum(
        1
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if "image/png" in out.get("data", {})
    )


def test_there_are_notebooks() -> None:
    assert "01-cusum-and-change-points.ipynb" in [p.name for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_defines_no_logic(path: Path) -> None:
    """Notebooks import from model/; functions and classes belong there, with tests."""
    nb = nbformat.read(path, as_version=4)
    for n, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        source = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(source)):
            assert not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda), (
                f"{path.name} cell {n} defines {type(node).__name__}: move it into model/"
            )


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_small_and_renders_plots(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nb = execute_small(path, monkeypatch)
    errors = [
        out for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]
    assert not errors
    assert images(nb) >= MIN_FIGURES.get(path.name, 1), f"{path.name}: too few rendered figures"
    if path.name.startswith("01-"):
        text = "".join(
            out.get("text", "") for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])
        )
        assert "SMALL=True" in text
        assert "real alarm (410, 'up', 400) -> confirmed=True start=400" in text
        assert "false alarm (324, 'up', 318) -> confirmed=False" in text
        assert "alarms after the re-baseline: 0 ; without it (the episode held open): 0" in text
    if path.name.startswith("02-"):
        text = "".join(
            out.get("text", "") for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])
        )
        assert "SMALL=True: " in text
        assert "==== swe: missed" in text and "<== attributed" in text
    if path.name.startswith("03-"):
        text = "".join(
            out.get("text", "") for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])
        )
        assert "SMALL=True: 60 runs replayed (60 generated, 0 real)" in text
        assert "failures with a recommendation:" in text and "week of 2026-01-05:" in text
        # reports/learning.json as the repository has it: six sets, K = 0 (zero-shot) … all
        assert "learning curves: 6 sets" in text and "tau_airline: ['0', '25', '50', '100', 'all']" in text

"""``triage cusum`` / ``triage changepoints``: exact JSON on seeded CSV files, line-numbered errors."""

from __future__ import annotations

import doctest
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import model.streams.series as series_module
from model.streams import detect, detect_changepoints
from serve.cli.main import app
from tests.conftest import ROOT

runner = CliRunner()


def write_csv(path: Path, values: np.ndarray, *, column: str = "latency") -> Path:
    lines = [f"row,{column},note"] + [f"{i},{v:.6f},ok" for i, v in enumerate(values)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def seeded_latency() -> np.ndarray:
    rng = np.random.default_rng(1)
    return np.r_[rng.normal(100.0, 10.0, 200), rng.normal(115.0, 10.0, 60)]


def test_cusum_json_exact(tmp_path: Path) -> None:
    csv = write_csv(tmp_path / "m.csv", seeded_latency())
    r = runner.invoke(app, ["cusum", str(csv), "--column", "latency", "--warmup", "100", "--arl0", "500"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert list(out) == ["alarms"]
    # One alarm for the one change (version 1.0 alarmed again every ~6 rows: 201, 207, 213, ...).
    assert [(a["index"], a["direction"], a["start"], a["closed"]) for a in out["alarms"]] == [
        (201, "up", 200, None)
    ]
    assert set(out["alarms"][0]) == {
        "index",
        "direction",
        "start",
        "statistic",
        "mean",
        "std",
        "bound",
        "closed",
    }
    # Same as the library on the values as written (6 decimals).
    values = np.round(seeded_latency(), 6)
    assert out["alarms"] == [
        {**a.model_dump(), "closed": None} for a in detect(values, warmup=100, arl0=500.0)
    ]
    # The baseline: the rows before the alarm (mean, n - 1 standard deviation); row 200, the first
    # shifted one, was learnt too: nothing had alarmed yet.
    assert (out["alarms"][0]["mean"], out["alarms"][0]["std"]) == pytest.approx(
        (float(values[:201].mean()), float(values[:201].std(ddof=1)))
    )


def test_cusum_with_given_baseline_and_a_closed_episode(tmp_path: Path) -> None:
    csv = write_csv(tmp_path / "m.csv", np.r_[np.full(10, 100.0), np.full(6, 120.0), np.full(20, 100.0)])
    r = runner.invoke(
        app, ["cusum", str(csv), "-c", "latency", "--mean", "100", "--std", "10", "--shift", "1"]
    )
    assert r.exit_code == 0, r.output
    # z = 2, k = 0.5: S+ = 1.5, 3.0, 4.5, 6.0 > h(ARL0 500) = 5.06 at row 13, 9.0 at row 15; back
    # at 0 after 18 rows of 100 (-0.5 each): the episode closes at row 33.
    assert json.loads(r.stdout) == {
        "alarms": [
            {
                "index": 13,
                "direction": "up",
                "start": 10,
                "statistic": 6.0,
                "mean": 100.0,
                "std": 10.0,
                "bound": 110.0,
                "closed": 33,
            }
        ]
    }


def test_changepoints_json_exact(tmp_path: Path) -> None:
    csv = write_csv(tmp_path / "m.csv", seeded_latency())
    r = runner.invoke(app, ["changepoints", str(csv), "--column", "latency"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["changepoints"] == [200]
    assert [(s["start"], s["end"]) for s in out["segments"]] == [(0, 200), (200, 260)]
    assert out["segments"][1]["mean"] == pytest.approx(float(np.round(seeded_latency(), 6)[200:].mean()))
    for method in ("window", "pelt"):
        r = runner.invoke(app, ["changepoints", str(csv), "--column", "latency", "--method", method])
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["changepoints"] == [200]
    r = runner.invoke(app, ["changepoints", str(csv), "--column", "latency", "--exact"])
    assert json.loads(r.stdout)["changepoints"] == [200]


def test_changepoints_window_keeps_row_indices(tmp_path: Path) -> None:
    values = np.r_[np.random.default_rng(2).normal(0, 1, 400), np.random.default_rng(3).normal(4, 1, 100)]
    csv = write_csv(tmp_path / "m.csv", values)
    r = runner.invoke(app, ["changepoints", str(csv), "-c", "latency", "--window", "300"])
    out = json.loads(r.stdout)
    assert out["changepoints"] == detect_changepoints(np.round(values, 6), max_points=300).changepoints == [400]
    assert out["segments"][0]["start"] == 200


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        ("a,b\n1,2\n", ["--column", "latency"], "line 1: no column 'latency' in .*; columns: a, b"),
        ("a,latency\n1,2\n2,x3\n", ["--column", "latency"], "line 3: column 'latency': expected a number, got 'x3'"),
        ("a,latency\n1,2\n\n2,\n", ["--column", "latency"], "line 4: column 'latency': empty value"),
        ("a,latency\n1,2\n2\n", ["--column", "latency"], "line 3: column 'latency': the row has 1 fields"),
        ("a,latency\n1,nan\n", ["--column", "latency"], "line 2: column 'latency': expected a finite number"),
        ("", ["--column", "latency"], "line 1: .* is empty: expected a header line"),
        ("a,latency\n", ["--column", "latency"], "has no data rows"),
    ],
)
@pytest.mark.parametrize("command", ["cusum", "changepoints"])
def test_bad_csv_names_the_line(tmp_path: Path, command: str, content: str, args: list[str], message: str) -> None:
    csv = tmp_path / "bad.csv"
    csv.write_text(content, encoding="utf-8")
    r = runner.invoke(app, [command, str(csv), *args])
    assert r.exit_code == 2
    assert r.stdout == ""
    err = r.stderr.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1
    assert re.search(message, err), err


def test_bad_options_are_clear_errors(tmp_path: Path) -> None:
    csv = write_csv(tmp_path / "m.csv", seeded_latency())
    r = runner.invoke(app, ["cusum", str(csv), "-c", "latency", "--warmup", "5", "--mean", "1", "--std", "1"])
    assert r.exit_code == 2 and "not all three" in r.stderr
    r = runner.invoke(app, ["cusum", str(csv), "-c", "latency", "--arl0", "1"])
    assert r.exit_code == 2 and "arl0 must be > 1" in r.stderr
    r = runner.invoke(app, ["changepoints", str(csv), "-c", "latency", "--method", "rbf"])
    assert r.exit_code == 2 and "--method must be one of pelt, binseg, window" in r.stderr
    r = runner.invoke(app, ["changepoints", str(csv), "-c", "latency", "--method", "binseg", "--exact"])
    assert r.exit_code == 2 and "exact applies to pelt only" in r.stderr
    r = runner.invoke(app, ["cusum", str(tmp_path / "missing.csv"), "-c", "latency"])
    assert r.exit_code == 2 and "cannot read" in r.stderr


def test_short_file_notes_the_unfinished_warmup(tmp_path: Path) -> None:
    csv = write_csv(tmp_path / "m.csv", np.arange(10.0))
    r = runner.invoke(app, ["cusum", str(csv), "-c", "latency"])
    assert r.exit_code == 0 and json.loads(r.stdout) == {"alarms": []}
    assert "warm-up did not finish" in r.stderr


@pytest.mark.slow  # two real `python -m serve.cli.main` processes: a few seconds each on 2 cores
def test_real_process_round_trip(tmp_path: Path) -> None:
    csv = write_csv(tmp_path / "m.csv", seeded_latency())
    r = subprocess.run(
        [sys.executable, "-m", "serve.cli.main", "changepoints", str(csv), "--column", "latency"],
        cwd=ROOT,
        capture_output=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr.decode()
    assert json.loads(r.stdout)["changepoints"] == [200]
    bad = subprocess.run(
        [sys.executable, "-m", "serve.cli.main", "cusum", str(csv), "--column", "note"],
        cwd=ROOT,
        capture_output=True,
        timeout=120,
    )
    assert bad.returncode == 2
    assert bad.stderr.decode().strip() == "error: line 2: column 'note': expected a number, got 'ok'"
    assert "Traceback" not in bad.stderr.decode()


def test_series_docstring_examples() -> None:
    result = doctest.testmod(series_module)
    assert result.attempted > 0 and result.failed == 0

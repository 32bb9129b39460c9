"""`triage datasets import|generate|card` and `triage label apply` through the real CLI."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from typer.testing import CliRunner

from model.data.labelling import read_manifest
from serve.cli.main import app

runner = CliRunner()


def _msgs(city: str) -> dict[str, object]:
    return {"messages": [
        {"role": "user", "content": f"Weather in {city}?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": json.dumps({"city": city})}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "18C"},
        {"role": "assistant", "content": "18C."},
    ]}


def test_import_jsonl_copies_read_only_with_a_manifest(tmp_path: Path) -> None:
    src = tmp_path / "logs.jsonl"
    src.write_text("\n".join(json.dumps(_msgs(c)) for c in ("Oslo", "Lima", "Kyoto")) + "\n", encoding="utf-8")
    raw = tmp_path / "raw"
    res = runner.invoke(app, ["datasets", "import", str(src), "--format", "openai", "--raw-dir", str(raw)])
    assert res.exit_code == 0, res.output
    assert "imported 3 traces from 1 file(s)" in res.output
    (rec,) = read_manifest(raw)
    assert rec.format == "openai" and rec.traces == 3 and rec.files[0]["name"] == "logs.jsonl"
    copy = raw / rec.id / "logs.jsonl"
    assert copy.read_bytes() == src.read_bytes()
    assert not copy.stat().st_mode & stat.S_IWUSR  # immutable
    again = runner.invoke(app, ["datasets", "import", str(src), "--format", "openai", "--raw-dir", str(raw)])
    assert again.exit_code == 0 and "already imported" in again.output
    assert len(read_manifest(raw)) == 1


def test_import_folder_auto_format(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    (logs / "sub").mkdir(parents=True)
    (logs / "a.json").write_text(json.dumps(_msgs("Oslo")), encoding="utf-8")
    (logs / "sub" / "b.json").write_text(json.dumps({"history": _msgs("Lima")["messages"]}), encoding="utf-8")
    (logs / "LICENSE").write_text("MIT", encoding="utf-8")  # not a log: left out
    res = runner.invoke(app, ["datasets", "import", str(logs), "--raw-dir", str(tmp_path / "raw")])
    assert res.exit_code == 0, res.output
    (rec,) = read_manifest(tmp_path / "raw")
    assert sorted(f["name"] for f in rec.files) == ["a.json", "sub/b.json"]


def test_import_rejects_a_malformed_line_and_copies_nothing(tmp_path: Path) -> None:
    src = tmp_path / "logs.jsonl"
    src.write_text(json.dumps(_msgs("Oslo")) + "\n" + json.dumps(_msgs("Lima")) + "\n{\"messages\": [\n",
                   encoding="utf-8")
    raw = tmp_path / "raw"
    res = runner.invoke(app, ["datasets", "import", str(src), "--raw-dir", str(raw)])
    assert res.exit_code == 2
    assert "line 3" in res.output and "Traceback" not in res.output
    assert read_manifest(raw) == [] and not any(raw.glob("*/*"))


def test_import_names_the_bad_field(tmp_path: Path) -> None:
    bad = _msgs("Oslo")
    bad["messages"][1]["role"] = "robot"  # type: ignore[index]
    src = tmp_path / "bad.json"
    src.write_text(json.dumps(bad), encoding="utf-8")
    res = runner.invoke(app, ["datasets", "import", str(src), "--raw-dir", str(tmp_path / "raw")])
    assert res.exit_code == 2
    assert "messages[1].role" in res.output


def test_import_unknown_format_and_missing_path(tmp_path: Path) -> None:
    src = tmp_path / "a.json"
    src.write_text(json.dumps(_msgs("Oslo")), encoding="utf-8")
    res = runner.invoke(app, ["datasets", "import", str(src), "--format", "csv", "--raw-dir", str(tmp_path / "r")])
    assert res.exit_code == 2 and "unknown format" in res.output
    res = runner.invoke(app, ["datasets", "import", str(tmp_path / "nope"), "--raw-dir", str(tmp_path / "r")])
    assert res.exit_code == 2 and "no such file" in res.output


def test_generate_label_split_and_card(tmp_path: Path) -> None:
    from model.data.splits import run as split_run

    gen = tmp_path / "gen.jsonl"
    res = runner.invoke(app, ["datasets", "generate", "--n", "40", "--seed", "6", "--out", str(gen),
                              "--params", str(tmp_path / "none.yaml")])
    assert res.exit_code == 0, res.output
    params = tmp_path / "params.yaml"
    params.write_text(f"label:\n  raw_dir: {tmp_path / 'raw'}\n  human_labels: {tmp_path / 'h.jsonl'}\n"
                      "split:\n  heldout_families: [retail]\n", encoding="utf-8")
    out = tmp_path / "labelled" / "traces.jsonl"
    res = runner.invoke(app, ["label", "apply", "--params", str(params), "--generated", str(gen), "--out", str(out)])
    assert res.exit_code == 0, res.output
    split_run(params, out, tmp_path / "splits")
    card = tmp_path / "README.md"
    card.write_text("# card\n\n<!-- counts:begin (written by `triage datasets card`; do not edit by hand) -->\nold\n"
                    "<!-- counts:end -->\n\ntail\n", encoding="utf-8")
    args = ["datasets", "card", "--summary", str(tmp_path / "splits" / "summary.json"), "--card", str(card)]
    assert runner.invoke(app, [*args, "--check"]).exit_code == 1
    assert runner.invoke(app, args).exit_code == 0
    text = card.read_text(encoding="utf-8")
    assert "Totals: 40 traces" in text and text.endswith("tail\n") and "old" not in text
    assert "| heldout_families |" in text
    assert runner.invoke(app, [*args, "--check"]).exit_code == 0

"""The DVC ``label`` stage: ``python -m model.data.labelling --params params.yaml``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from model.core.errors import InputError
from model.data.labelling.stage import LabelConfig, run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m model.data.labelling", description="Label generated and imported traces.")
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--generated", type=Path, default=Path("datasets/generated/traces.jsonl"))
    ap.add_argument("--out", type=Path, default=Path("datasets/labelled/traces.jsonl"))
    a = ap.parse_args(argv)
    try:
        params = yaml.safe_load(a.params.read_text(encoding="utf-8")) if a.params.exists() else {}
        cfg = LabelConfig.from_params(dict((params or {}).get("label", {}) or {}))
        s = run(cfg, a.generated, a.out)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"labelled {s['traces']} traces ({s['generated']} generated, {s['imported']} imported, "
          f"{s['human']} with human labels, {s['review']} to review) in {s['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The DVC ``generate`` stage: ``python -m model.data.datagen --params params.yaml``.

Writes ``datasets/generated/traces.jsonl`` (one Trace per line) and ``summary.json`` beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import yaml

from model.core.errors import InputError
from model.data.datagen.generator import GenerateConfig, generate, read_jsonl, summary, write_jsonl


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m model.data.datagen", description="Generate labelled agent traces.")
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--out", type=Path, default=Path("datasets/generated/traces.jsonl"))
    ap.add_argument("-n", "--n-traces", type=int, default=None, help="override generate.n_traces")
    a = ap.parse_args(argv)
    try:
        params = yaml.safe_load(a.params.read_text(encoding="utf-8")) if a.params.exists() else {}
        section = dict((params or {}).get("generate", {}) or {})
        if a.n_traces is not None:
            section["n_traces"] = a.n_traces
        cfg = GenerateConfig.from_params(section)
    except (InputError, yaml.YAMLError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    n = write_jsonl(generate(cfg), a.out)
    s = summary(list(read_jsonl(a.out)))
    # (no timing in the file: DVC outputs must be byte-for-byte reproducible)
    (a.out.parent / "summary.json").write_text(json.dumps(s, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {n} traces to {a.out} in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

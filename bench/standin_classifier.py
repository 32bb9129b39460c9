"""Build a stand-in classifier artefact for `bench/service.py` while no model is shipped.

It has the production student's architecture (params.yaml / DistillConfig defaults: 4 layers ×
256 hidden, 4 heads, max_length 256, int8 ONNX) but is trained for a few steps on 128 generated
examples, so its *speed* is representative and its *answers* are not. Needs the `train` extra.

    .venv/bin/python bench/standin_classifier.py /tmp/bench-clf
    .venv/bin/python bench/service.py --model-path /tmp/bench-clf/artifacts
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    from model.data.builder import make_trace
    from model.training.classifier import distill, export
    from model.training.classifier.config import DistillConfig, ExportConfig

    root = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/bench-clf")
    splits = root / "splits"
    splits.mkdir(parents=True, exist_ok=True)
    kinds = [
        None,
        "tool_error",
        "loop",
        "refusal",
        "empty_response",
        "timeout",
        "ignored_error",
        "malformed_call",
    ]
    for split, offset in (("train", 0), ("val", 1000), ("test", 2000), ("heldout_families", 3000)):
        with (splits / f"{split}.jsonl").open("w", encoding="utf-8") as fh:
            for i in range(60):
                t = make_trace(kinds[i % len(kinds)], seed=offset + i, n_steps=6 + i % 9)
                fh.write(t.model_dump_json() + "\n")
    t0 = time.time()
    cfg = DistillConfig.from_dict(
        {
            "train_examples": 128,
            "val_examples": 64,
            "batch_size": 32,
            "epochs": 1,
            "eval_every": 1000,
            "patience": 100,
        }
    )
    distill.run(cfg, splits, None, root / "build" / "student")
    texts = [json.dumps(i) for i in range(20)]
    export.run(ExportConfig.from_dict({"candidates": ["student"]}), root / "build", root / "artifacts", texts)
    print(f"stand-in artefact in {root / 'artifacts'} ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()

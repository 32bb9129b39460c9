"""Digests of every model output on the vendored real sets, to show that a refactor changed no output.

Run it once with each tree's code on ``PYTHONPATH`` (a worktree of the base, then this checkout) and
compare the two files::

    git worktree add -f /tmp/base main
    (cd /tmp/base && PYTHONPATH=/tmp/base:/tmp/base/client $PWD/.venv/bin/python $PWD/bench/model_digests.py /tmp/base.json)
    .venv/bin/python bench/model_digests.py /tmp/this.json
    .venv/bin/python bench/model_digests.py --compare /tmp/base.json /tmp/this.json

Per real run (all 1,826 of ``datasets/real`` by default; ``--every K`` takes every K-th): the whole
diagnosis response of the shipped models (classifier, run scorer, rules), the classifier's
probabilities (bytes) and the token ids of every step text, ``score_step`` and ``inspect_step_scored``
of the last step, the per-kind maxima, the unrounded zero-shot probability and continuous part,
``message_features`` and ``run_features`` (bytes), ``RunScorer.score`` with and without evidence,
``identity.signature`` and ``extract_metrics``; and for every ``--sessions-every``-th run, every append
of an ``IncrementalDiagnoser`` session (the first 120 steps) at window 64 and at window 8: the response
and the session state. The file maps each key to a sha256 (about 9 minutes for all runs on a loaded
2-core host). It imports the code of the tree ``PYTHONPATH`` names first.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any


def _h(x: Any) -> str:
    import numpy as np

    if isinstance(x, np.ndarray):
        b = x.dtype.str.encode() + str(x.shape).encode() + np.ascontiguousarray(x).tobytes()
    else:
        b = str(x).encode()
    return hashlib.sha256(b).hexdigest()


def digests(every: int, sessions_every: int) -> dict[str, str]:
    from model.core.identity import signature
    from model.data.realdata import load_all
    from model.diagnosis.diagnoser import Diagnoser
    from model.diagnosis.incremental import IncrementalDiagnoser
    from model.scoring.classifier.representation import trace_texts
    from model.scoring.runscore.features import message_features, run_features
    from model.scoring.runscore.zeroshot import classifier_maxima, evidence
    from model.streams.metrics import extract_metrics

    d = Diagnoser.with_shipped_models(threads=1)
    clf: Any = d.detectors["classifier"]
    rt = clf.load()
    scorer = d.runscorer
    assert scorer is not None and scorer.zero_shot_ is not None
    out: dict[str, str] = {}
    for k, r in enumerate(load_all()):
        if k % every:
            continue
        t = r.trace.model_copy(update={"labels": None})
        key = f"{r.source}/{t.id}/{k}"
        out[key + ":diag"] = _h(d.diagnose(t).model_dump_json())
        if t.steps:
            probs = rt.score_trace(t)
            out[key + ":probs"] = _h(probs)
            out[key + ":ids"] = _h(rt.token_ids(trace_texts(t, rt.meta.representation)))
            mx = classifier_maxima(t, probs, rt.labels, 0)
            out[key + ":maxima"] = _h(repr(mx))
            ev = evidence([("rule", 0.1 + (k % 7) / 20)], mx)
            out[key + ":prob_unrounded"] = _h(repr((scorer.probability(None, ev), scorer.probability(0.8, ev),
                                                   scorer.zero_shot_.continuous(ev), ev)))
            if len(t.steps) > 1:
                last = len(t.steps) - 1
                out[key + ":step_last"] = _h(rt.score_step(t, last)) + _h(repr(clf.inspect_step_scored(t, last)))
        units, X = message_features(t)
        out[key + ":X"] = _h(X) + _h(repr(units))
        out[key + ":run"] = _h(run_features(t, units, X))
        for name, kw in (("score", {"rule_confidence": 0.7, "evidence": {"signal": 0.3, "clf:unsafe_output": 0.4}}),
                         ("score0", {})):
            s = scorer.score(t, **kw)
            out[f"{key}:{name}"] = _h(repr((s.failure_probability, s.attribution, s.units, s.message_probabilities)))
        out[key + ":sig"] = _h(repr(signature(t)) + repr(signature(t).channels))
        out[key + ":metrics"] = _h(extract_metrics(t, failure_prob=0.3).model_dump_json())
        if k % sessions_every == 0 and t.steps:
            for window in (64, 8):
                inc = IncrementalDiagnoser(d, window=window)
                state: dict[str, Any] = {}
                parts = []
                for i in range(1, min(len(t.steps), 120) + 1):
                    resp = inc.diagnose(t.model_copy(update={"steps": t.steps[:i]}), state)
                    parts.append(_h(resp.model_dump_json()) + _h(json.dumps(state, sort_keys=True, default=str)))
                out[f"{key}:session{window}"] = _h("".join(parts))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, nargs="?", help="where to write the digests (JSON)")
    ap.add_argument("--every", type=int, default=1, help="every K-th real run")
    ap.add_argument("--sessions-every", type=int, default=40, help="a session of every K-th run")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("BASE", "THIS"), help="compare two digest files")
    a = ap.parse_args()
    if a.compare:
        base, this = (json.loads(p.read_text()) for p in a.compare)
        differ = sorted(k for k in base.keys() | this.keys() if base.get(k) != this.get(k))
        print(f"{len(base)} / {len(this)} digests; {len(differ)} differ" + (f": {differ[:20]}" if differ else ""))
        sys.exit(1 if differ else 0)
    if a.out is None:
        ap.error("the output file, or --compare BASE THIS")
    t0 = time.time()
    out = digests(a.every, a.sessions_every)
    a.out.write_text(json.dumps(out, indent=0, sort_keys=True) + "\n")
    print(f"{len(out)} digests in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()

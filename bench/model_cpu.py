"""The model's share of a request's CPU, in process: ``bench/request_path.py``'s service and bodies, with
``Diagnoser.decide`` and the classifier's ONNX forward timed apart.

For each scenario (a 10-step diagnosis with the classifier; a session step), the median of ``--repeats``
blocks of ``--n`` requests (after 50 of warm-up) of ``time.process_time`` a request: the whole request
(``serve.intake.take`` and the service call, as ``bench/request_path.py`` times it), ``decide`` (the
model's verdict: detectors, fusion, run scorer, repair), the forward inside it, and ``decide`` less the
forward (the model's own Python). onnxruntime gets one intra-op thread.

``--distinct``: every diagnosis's step texts carry a word of their own (a JSON result a key of its own),
as a new trace would: the bench's bodies are one agent's runs (``bench/service.py``: the builder's run of
seed i, the same prompts and tools), so many texts of theirs were seen before, and what caches by text
(the tokenizer's pieces, the rules' normalised results) flatters them.

``--parts``: instead, each piece of the model's path on the bench's 10-step trace alone (``timeit``,
best of 5): the classifier's texts, their ids (with no piece cached, as for a new trace, and again),
its findings and maxima, the run scorer, the rules (sharing one graph), ``signature`` and
``extract_metrics`` (and the refusal rule it runs unless given the diagnosis's findings), the onnxruntime
forward of the trace's texts, and a whole ``Diagnoser.diagnose``; for scale, the request's pieces outside the
model (the intake, the redaction of the trace, the trace's and the response's dumps).

It imports the code of the tree ``PYTHONPATH`` names first; run it in each tree, alternating::

    PYTHONPATH=$TREE:$TREE/client .venv/bin/python bench/model_cpu.py --n 200 --repeats 5 [--distinct]
    PYTHONPATH=$TREE:$TREE/client .venv/bin/python bench/model_cpu.py --parts

``--base TREE`` (a worktree of the base commit) does the alternating itself, finer: a worker process a
tree (each tree's code on its ``PYTHONPATH``, loaded and warmed once), told block by block which to run,
the base's and this checkout's blocks one after the other (who goes first alternates), and reports each
figure's median per tree and the median of the blocks' this ÷ base ratios. On a shared host whose speed
moves from one minute to the next, blocks seconds apart compare what runs a minute apart cannot::

    .venv/bin/python bench/model_cpu.py --base /tmp/base --n 100 --repeats 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from service import _bodies, session_step  # noqa: E402

for _tree in reversed([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]):
    sys.path.insert(0, _tree)  # bench/service.py put this checkout first: the named trees go back before it


def distinct(bodies: list[bytes]) -> list[bytes]:
    """The bodies with a word (or a JSON key) of each request's own in every step's content."""
    out = []
    for i, b in enumerate(bodies):
        d = json.loads(b)
        for j, st in enumerate(d["trace"]["steps"]):
            c = st.get("content")
            if not c:
                continue
            try:
                v = json.loads(c)
            except ValueError:
                v = None
            st["content"] = json.dumps({**v, "ref": f"r{i}x{j}"}) if isinstance(v, dict) else f"{c} ref{i}x{j}"
        out.append(json.dumps(d).encode())
    return out


def parts() -> None:
    """Each piece of the model's path on the bench trace, in µs (best of 5 timeit runs)."""
    import timeit

    from service import bench_trace

    from model.core.identity import signature
    from model.core.schema import Trace
    from model.core.shared_graphs import shared_graphs
    from model.detectors.rules.refusal import RefusalRule
    from model.diagnosis.decision import Context
    from model.diagnosis.diagnoser import Diagnoser
    from model.scoring.classifier.representation import trace_texts
    from model.scoring.runscore.zeroshot import classifier_maxima
    from model.streams.metrics import extract_metrics
    from serve.intake import take
    from serve.redaction import Redactor

    raw = json.dumps({"trace": bench_trace(10, seed=3), "options": {}}).encode()
    t = Trace.model_validate(bench_trace(10, seed=3))
    d = Diagnoser.with_shipped_models(threads=1)
    redactor = Redactor()
    verdict = d.decide(t, Context(agent="bench", state={}))
    clf: Any = d.detectors["classifier"]
    rt = clf.load()
    rs = d.runscorer
    assert rs is not None
    texts = trace_texts(t, rt.meta.representation)
    probs = rt.score_trace(t)
    rules = [det for name, det in d.detectors.items() if name != "classifier"]

    def cold_ids() -> Any:
        getattr(rt._ids, "_pieces", {}).clear()  # a new trace's texts: no piece seen before (its words are)
        return rt.token_ids(texts)

    def all_rules() -> None:
        with shared_graphs():
            for det in rules:
                det.inspect(t)

    pieces: list[tuple[str, Callable[[], Any], int]] = [
        ("classifier texts (trace_texts)", lambda: trace_texts(t, rt.meta.representation), 300),
        ("token ids, no piece cached", cold_ids, 300),
        ("token ids, pieces cached", lambda: rt.token_ids(texts), 300),
        ("encode (ids + arrays)", lambda: rt.encode(texts), 300),
        ("classifier findings", lambda: clf._findings(t, probs, 0), 300),
        ("classifier maxima", lambda: classifier_maxima(t, probs, rt.labels, 0), 300),
        ("run scorer score", lambda: rs.score(t, rule_confidence=None, evidence={"signal": 0.2}), 300),
        ("all rules, one graph", all_rules, 300),
        ("signature", lambda: signature(t), 300),
        ("extract_metrics", lambda: extract_metrics(t, failure_prob=0.3), 300),
        ("  the refusal rule in it", lambda: RefusalRule().inspect(t), 300),
        ("onnxruntime forward (one batch)", lambda: rt.forward(rt.encode(texts)), 100),
        ("Diagnoser.diagnose (forward included)", lambda: d.diagnose(t), 50),
        # the request's pieces outside the model (serve/), for scale
        ("serve: intake take (parse, validate, import)", lambda: take(raw, max_steps=5000), 300),
        ("serve: redact_trace", lambda: redactor.redact_trace(t), 300),
        ("serve: the trace dumped to store", lambda: t.model_dump(mode="json", exclude_none=True), 300),
        ("serve: the response dumped and redacted", lambda: redactor.redact(verdict.response.model_dump(mode="json")),
         300),
    ]
    print(f"load average {os.getloadavg()[0]:.2f}; µs a call, best of 5")
    for name, fn, number in pieces:
        try:
            fn()
        except TypeError:  # a base tree without the call's argument
            print(f"  {name:46s}   (not in this tree)")
            continue
        best = min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6
        print(f"  {name:46s} {best:9.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--distinct", action="store_true", help="a new trace each diagnosis (see above)")
    ap.add_argument("--parts", action="store_true", help="each piece of the path alone (see above)")
    ap.add_argument("--base", help="a worktree of the base commit: it and this checkout alternate blocks (see above)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.parts:
        parts()
    elif a.base:
        paired(a)
    else:
        blocks(a)


def paired(a: argparse.Namespace) -> None:
    """``--base``: a worker process a tree (its code on ``PYTHONPATH``), told block by block which to run."""
    trees = {"base": Path(a.base).resolve(), "this": ROOT}
    workers = {}
    for name, tree in trees.items():
        cmd = [sys.executable, __file__, "--worker", "--n", str(a.n), "--repeats", str(a.repeats)]
        env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'client'}"}
        workers[name] = subprocess.Popen(cmd + (["--distinct"] if a.distinct else []), env=env, text=True,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    for name, w in workers.items():
        assert w.stdout is not None
        ran = Path(json.loads(w.stdout.readline()))
        if ran != trees[name]:
            raise SystemExit(f"the {name} worker runs {ran}, not {trees[name]}")
    load = os.getloadavg()[0]
    rows: dict[tuple[str, str], list[list[float]]] = {}
    try:
        for scenario in SCENARIOS:
            for r in range(a.repeats):
                for name in ("base", "this") if r % 2 == 0 else ("this", "base"):  # who goes first alternates
                    w = workers[name]
                    assert w.stdin is not None and w.stdout is not None
                    w.stdin.write(f"{scenario} {r}\n")
                    w.stdin.flush()
                    rows.setdefault((scenario, name), []).append(json.loads(w.stdout.readline()))
    finally:
        for w in workers.values():
            if w.stdin is not None:
                w.stdin.close()
            w.wait()
    print(f"load average {load:.2f} → {os.getloadavg()[0]:.2f}; CPU ms a request, median of {a.repeats} blocks of "
          f"{a.n} a tree, the trees' blocks alternated (base: {trees['base']}); this ÷ base: the median of the "
          "blocks' ratios")
    for scenario in SCENARIOS:
        for k, what in enumerate(("whole", "decide", "forward", "decide less forward")):
            base = [b[k] for b in rows[(scenario, "base")]]
            this = [t[k] for t in rows[(scenario, "this")]]
            ratio = statistics.median(t / b for b, t in zip(base, this, strict=True))
            print(f"{scenario:14s} {what:20s} base {statistics.median(base):.3f} ({min(base):.3f}–{max(base):.3f})  "
                  f"this {statistics.median(this):.3f} ({min(this):.3f}–{max(this):.3f})  this ÷ base {ratio:.3f}")


SCENARIOS = ("diag_clf_10", "session_step")


def blocks(a: argparse.Namespace) -> None:
    """The blocks of one tree (the code ``PYTHONPATH`` names); ``--worker``: each block when told on stdin."""
    import model.diagnosis.diagnoser as dg
    from model.scoring.classifier.runtime import ClassifierRuntime
    from serve import wiring
    from serve.intake import take
    from serve.schemas import AppendStepsRequest
    from serve.settings import Settings

    acc = {"forward": 0.0, "decide": 0.0}

    def wrap(owner: Any, name: str, key: str) -> None:
        fn = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                acc[key] += time.process_time() - t0

        setattr(owner, name, timed)

    wrap(ClassifierRuntime, "forward", "forward")
    wrap(dg.Diagnoser, "decide", "decide")
    tmp = Path(tempfile.mkdtemp(prefix="triage-modelcpu-"))
    settings = Settings(data_dir=tmp, database_url=f"sqlite:///{tmp / 'triage.db'}", auth="off", ort_threads=1)
    diagnoser, _ = wiring.build_diagnoser(settings)
    service = wiring.build_service(settings, diagnoser)
    wiring.settle()
    total = 50 + a.n * a.repeats
    bodies = _bodies("diag_clf_10", total)
    if a.distinct:
        bodies = distinct(bodies)

    def diagnosis(i: int) -> None:
        body, trace = take(bodies[i], max_steps=settings.max_steps, format=None, options=None)
        service.diagnose("bench", trace, body.options).model_dump_json()

    def step(i: int) -> None:
        req = AppendStepsRequest.model_validate_json(session_step(i))
        service.append_steps("bench", f"s-{os.getpid()}-{i // 20}", req).model_dump_json()

    fns: dict[str, Callable[[int], None]] = {"diag_clf_10": diagnosis, "session_step": step}

    def block(fn: Callable[[int], None], r: int) -> list[float]:
        acc.update(forward=0.0, decide=0.0)
        t0 = time.process_time()
        for i in range(50 + r * a.n, 50 + (r + 1) * a.n):
            fn(i)
        whole = (time.process_time() - t0) * 1000 / a.n
        return [whole, acc["decide"] * 1000 / a.n, acc["forward"] * 1000 / a.n,
                (acc["decide"] - acc["forward"]) * 1000 / a.n]

    try:
        for fn in fns.values():
            for i in range(50):
                fn(i)
        if a.worker:
            import serve

            print(json.dumps(str(Path(serve.__file__).resolve().parent.parent)), flush=True)  # the tree it runs
            for line in sys.stdin:
                name, r = line.split()
                print(json.dumps(block(fns[name], int(r))), flush=True)
            return
        print(f"load average {os.getloadavg()[0]:.2f}; CPU ms a request, median of {a.repeats} blocks of {a.n}")
        for name, fn in fns.items():
            rows = [block(fn, r) for r in range(a.repeats)]
            med = [statistics.median(c) for c in zip(*rows, strict=True)]
            own = [r[3] for r in rows]
            print(f"{name:14s} whole {med[0]:.3f}  decide {med[1]:.3f}  forward {med[2]:.3f}  "
                  f"decide less forward {med[3]:.3f} ({min(own):.3f}–{max(own):.3f})")
    finally:
        service.close()
        wiring.unsettle()


if __name__ == "__main__":
    main()

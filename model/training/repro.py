"""``make repro``: rebuild every DVC stage in a scratch copy and compare it with what is shipped.

The trained models (``model/artifacts/*``) and the reports (``reports/*``) are committed files, and a
plain ``dvc repro`` overwrites them in place. This module rebuilds the pipeline elsewhere instead:

1. copy the working tree (tracked and untracked-but-not-ignored files, as ``git ls-files`` lists
   them) into a scratch folder, with DVC set to work there without git (``core.no_scm``);
2. run each stage of ``dvc.yaml`` there, in dependency order, with ``dvc repro --single-item
   --force --no-commit`` (every stage runs, nothing goes into a DVC cache), timing each;
3. compare what it built with the real tree (:func:`compare`): each stage output's md5 with the one
   shipped (``dvc.lock`` for outputs that are not committed), and the headline figures of the
   reports and artefacts within :data:`TOLERANCE` (the gate's decision exactly);
4. print the table, write it to ``<scratch>/repro.md`` and check that the real tree's
   ``git status`` and ``dvc.lock`` are as they were.

``python -m model.training.repro`` (all stages); ``--stages runscore evaluate_real`` rebuilds only
those, on the shipped upstream outputs; ``--compare-only SCRATCH`` compares an earlier scratch copy
again. :func:`stale_code_deps` is the check ``tests/test_repro.py`` runs: the stages whose code or
params changed since ``dvc.lock`` recorded them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

#: Absolute tolerance on a headline figure, by the stage that writes it. The classifier's stages stop
#: at a wall-clock budget (``max_minutes``), so a rebuild on a busier machine trains on fewer batches:
#: its figures on 1,200 generated traces may move by a few points. The real-run stages fit on fixed
#: data, and move only through the classifier's scores they read.
TOLERANCE: dict[str, float] = {"export": 0.03, "evaluate": 0.03, "runscore": 0.02, "evaluate_real": 0.02,
                               "learning_curve": 0.02}

#: Stages whose outputs must come out byte for byte (seeded, no training): their md5 is the check.
BYTE_EXACT = frozenset({"generate", "label", "split"})

#: The headline figures compared, per (stage, file): dotted paths, ``*`` for every key of a mapping.
#: Numbers are compared within the stage's tolerance; strings, booleans and lists exactly.
HEADLINES: dict[tuple[str, str], tuple[str, ...]] = {
    ("export", "reports/metrics.json"): ("selection.shipped", "selection.candidates.*.val_f1"),
    ("evaluate", "reports/metrics.json"): (
        "test.macro_f1", "heldout_families.macro_f1", "step_localisation.exact", "step_localisation.within_3",
        "calibration.ece", "candidates.*.test.macro_f1", "candidates.*.heldout_families.macro_f1",
    ),
    ("gate", "model/artifacts/gate.json"): ("model", "failure_kinds"),
    ("runscore", "model/artifacts/runscore.json"): (
        "meta.runs", "zero_shot.features", "zero_shot.threshold", "zero_shot.prior", "rule_stats.*.precision",
        "rule_stats.*.demoted",
    ),
    ("evaluate_real", "reports/real.json"): (
        "classifier_gate.decision.failure_kinds", "sets.*.auroc.auroc", "sets.*.operating_point.false_alarms.rate",
        "sets.*.operating_point.recall.rate", "sets.*.calibration.ece", "in_domain.*.auroc.auroc",
    ),
    ("learning_curve", "reports/learning.json"): (
        "done_when.per_set.*.agent", "done_when.per_set.*.better_cheap", "done_when.per_set.*.better_cheap_auroc",
        "done_when.mean_diff_vs_better.diff", "sets.*.zero_shot.auroc",
    ),
}


@dataclass(frozen=True)
class Stage:
    """One stage of ``dvc.yaml``: its dependencies (code, params files, data) and outputs."""

    name: str
    deps: tuple[str, ...]
    outs: tuple[str, ...]
    params: tuple[str, ...] = ()
    committed: tuple[str, ...] = ()  # outputs kept in git (``cache: false``), not in a DVC cache


@dataclass
class StageRun:
    """How one stage's rebuild went."""

    name: str
    seconds: float
    returncode: int
    log: Path


@dataclass
class Row:
    """One line of the comparison: ``ok`` is ``None`` where the line informs and is not judged."""

    stage: str
    artefact: str
    shipped: str
    rebuilt: str
    ok: bool | None
    note: str = ""


@dataclass
class Report:
    """The rebuild and its comparison."""

    scratch: Path
    runs: list[StageRun] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    tree_untouched: bool | None = None

    @property
    def passed(self) -> bool:
        return (all(r.returncode == 0 for r in self.runs) and all(r.ok is not False for r in self.rows)
                and self.tree_untouched is not False)


def _paths(entries: list[Any] | None) -> tuple[str, ...]:
    """The paths of a ``deps``/``outs``/``metrics`` list (an entry is a path or ``{path: options}``)."""
    out: list[str] = []
    for entry in entries or []:
        out.extend([entry] if isinstance(entry, str) else list(entry))
    return tuple(out)


def _uncached(entries: list[Any] | None) -> tuple[str, ...]:
    return tuple(path for e in entries or [] if isinstance(e, dict)
                 for path, opts in e.items() if (opts or {}).get("cache") is False)


def load_stages(root: Path) -> list[Stage]:
    """The stages of ``root/dvc.yaml`` in file order; metrics count as outputs."""
    spec = yaml.safe_load((root / "dvc.yaml").read_text(encoding="utf-8"))
    return [
        Stage(name, _paths(s.get("deps")), _paths(s.get("outs")) + _paths(s.get("metrics")),
              tuple(p if isinstance(p, str) else next(iter(p)) for p in s.get("params") or []),
              _uncached(s.get("outs")) + _uncached(s.get("metrics")))
        for name, s in spec["stages"].items()
    ]


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/") or folder.startswith(path.rstrip("/") + "/")


def stage_order(stages: list[Stage]) -> list[str]:
    """The stages in dependency order (a stage after every stage whose output it reads; file order
    otherwise). ``dvc.yaml``'s own order is not one: ``gate`` reads ``evaluate_real``'s report."""
    upstream = {
        s.name: {o.name for o in stages if o is not s and any(_under(d, out) for d in s.deps for out in o.outs)}
        for s in stages
    }
    done: list[str] = []
    while len(done) < len(stages):
        ready = [s.name for s in stages if s.name not in done and upstream[s.name] <= set(done)]
        if not ready:
            raise ValueError(f"dvc.yaml has a cycle among {sorted(set(upstream) - set(done))}")
        done.append(ready[0])
    return done


def code_deps(stages: list[Stage]) -> dict[str, tuple[str, ...]]:
    """Each stage's dependencies that no stage writes: its code, configuration and vendored data."""
    outs = [o for s in stages for o in s.outs]
    return {s.name: tuple(d for d in s.deps if not any(_under(d, o) for o in outs)) for s in stages}


# ---- md5 as DVC computes it ------------------------------------------------------------------------------


def file_md5(path: Path) -> str:
    digest = hashlib.md5()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _ignored(rel: Path) -> bool:
    # the repository's .dvcignore: bytecode
    return "__pycache__" in rel.parts or rel.suffix == ".pyc"


def dvc_md5(path: Path) -> str:
    """DVC's md5 of a file (its bytes) or of a folder (the md5 of its ``.dir`` listing, with ``.dir``)."""
    if path.is_file():
        return file_md5(path)
    entries = sorted(
        ({"md5": file_md5(p), "relpath": p.relative_to(path).as_posix()}
         for p in path.rglob("*") if p.is_file() and not _ignored(p.relative_to(path))),
        key=lambda e: e["relpath"],
    )
    listing = json.dumps(entries, sort_keys=True).encode()
    return hashlib.md5(listing).hexdigest() + ".dir"


def locked(root: Path) -> dict[str, dict[str, Any]]:
    """``dvc.lock``'s stages: name → ``{"deps": {path: md5}, "outs": {path: md5}, "params": {...}}``."""
    lock = yaml.safe_load((root / "dvc.lock").read_text(encoding="utf-8"))
    return {
        name: {
            "deps": {d["path"]: d.get("md5") for d in s.get("deps", [])},
            "outs": {o["path"]: o.get("md5") for o in s.get("outs", [])},
            "params": s.get("params", {}),
        }
        for name, s in lock.get("stages", {}).items()
    }


def stale_code_deps(root: Path) -> dict[str, list[str]]:
    """Stages whose code or params changed since ``dvc.lock``: name → what changed.

    Compares the md5 ``dvc.lock`` recorded for each dependency no stage writes (:func:`code_deps`)
    and each ``params.yaml`` section with the files on disk; a stage missing from the lock is
    reported too. Outputs of other stages are left out: they are rebuilt, not edited.
    """
    stages = load_stages(root)
    lock = locked(root)
    params = yaml.safe_load((root / "params.yaml").read_text(encoding="utf-8"))
    stale: dict[str, list[str]] = {}
    for stage in stages:
        rec = lock.get(stage.name)
        if rec is None:
            stale[stage.name] = ["not in dvc.lock"]
            continue
        changed = []
        for dep in code_deps(stages)[stage.name]:
            path = root / dep
            if not path.exists():
                changed.append(f"{dep} (deleted)")
            elif dep not in rec["deps"]:
                changed.append(f"{dep} (not in dvc.lock)")
            elif dvc_md5(path) != rec["deps"][dep]:
                changed.append(dep)
        recorded = rec["params"].get("params.yaml", {})
        changed += [f"params.yaml:{p}" for p in stage.params if recorded.get(p) != params.get(p)]
        if changed:
            stale[stage.name] = changed
    return stale


# ---- the rebuild -----------------------------------------------------------------------------------------


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def tree_state(root: Path) -> tuple[str, str]:
    """What must not change: ``git status --porcelain`` and ``dvc.lock``'s md5."""
    return _git(root, "status", "--porcelain"), file_md5(root / "dvc.lock")


def scratch_copy(root: Path, dest: Path) -> None:
    """Copy the working tree's files (tracked, and untracked but not ignored) to ``dest``."""
    listed = _git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for rel in filter(None, listed):
        src = root / rel
        if src.is_file():  # a tracked file deleted in the working tree is not copied
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    (dest / ".dvc").mkdir(exist_ok=True)
    (dest / ".dvc" / "config.local").write_text("[core]\n    no_scm = true\n", encoding="utf-8")


def stage_env(scratch: Path) -> dict[str, str]:
    """The stages' environment: the scratch copy importable, and ``python`` and ``triage`` (two stages'
    commands) this interpreter, whatever the venv's entry-point scripts say (a moved venv keeps the
    old path in their ``#!`` line)."""
    shims = scratch / "repro-logs" / "bin"
    shims.mkdir(parents=True, exist_ok=True)
    # scripts, not symlinks: a python started through a link in another folder finds no pyvenv.cfg
    # beside it and runs without the venv's packages
    for name, body in (("python", f'exec "{sys.executable}" "$@"'),
                       ("triage", f'exec "{sys.executable}" -m serve.cli.main "$@"')):
        (shims / name).unlink(missing_ok=True)
        (shims / name).write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
        (shims / name).chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(shims), str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join([str(scratch), str(scratch / "client")])
    return env


def run_stage(scratch: Path, name: str, env: dict[str, str]) -> StageRun:
    """``dvc repro`` of one stage in ``scratch``, its output in ``<scratch>/repro-logs/<name>.log`` and
    its time and exit status in ``<name>.json`` (what ``--resume`` reads)."""
    log = scratch / "repro-logs" / f"{name}.log"
    log.parent.mkdir(exist_ok=True)
    dvc = Path(sys.executable).parent / "dvc"
    start = time.monotonic()
    with log.open("w", encoding="utf-8") as fh:
        proc = subprocess.run([str(sys.executable), str(dvc), "repro", "--single-item", "--force", "--no-commit",
                               name], cwd=scratch, env=env, stdout=fh, stderr=subprocess.STDOUT, check=False)
    run = StageRun(name, time.monotonic() - start, proc.returncode, log)
    log.with_suffix(".json").write_text(json.dumps({"seconds": run.seconds, "returncode": run.returncode}),
                                        encoding="utf-8")
    return run


def earlier_runs(scratch: Path) -> list[StageRun]:
    """The stage runs recorded in ``scratch`` (by an earlier, interrupted rebuild)."""
    runs = []
    for rec in (scratch / "repro-logs").glob("*.json"):
        data = json.loads(rec.read_text(encoding="utf-8"))
        runs.append(StageRun(rec.stem, float(data["seconds"]), int(data["returncode"]), rec.with_suffix(".log")))
    return runs


# ---- the comparison --------------------------------------------------------------------------------------


def _expand(doc: Any, path: str) -> list[tuple[str, Any]]:
    """The values at a dotted ``path`` (``*``: every key), with their concrete paths; missing: none."""
    found: list[tuple[str, Any]] = [("", doc)]
    for part in path.split("."):
        nxt: list[tuple[str, Any]] = []
        for prefix, value in found:
            if not isinstance(value, dict):
                continue
            keys = sorted(value) if part == "*" else [part] if part in value else []
            nxt.extend((f"{prefix}.{k}".lstrip("."), value[k]) for k in keys)
        found = nxt
    return found


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none"
    return str(value)


def compare_values(stage: str, artefact: str, shipped: Any, rebuilt: Any, tol: float) -> Row:
    """One headline figure: numbers within ``tol``, anything else equal."""
    if shipped is None or rebuilt is None:
        return Row(stage, artefact, _show(shipped), _show(rebuilt), shipped == rebuilt, "missing on one side")
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (shipped, rebuilt))
    if numeric:
        diff = float(rebuilt) - float(shipped)
        return Row(stage, artefact, _show(shipped), _show(rebuilt), abs(diff) <= tol + 1e-12, f"{diff:+.4f} (±{tol})")
    return Row(stage, artefact, _show(shipped), _show(rebuilt), shipped == rebuilt, "exact")


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def compare(root: Path, scratch: Path, stages: list[str] | None = None) -> list[Row]:
    """The comparison table of ``scratch`` (rebuilt) against ``root`` (shipped), for ``stages``
    (default: every stage whose log says it ran; a stage not rebuilt is listed as such)."""
    all_stages = {s.name: s for s in load_stages(root)}
    order = stage_order(list(all_stages.values()))
    ran = [n for n in order if (scratch / "repro-logs" / f"{n}.log").exists()] if stages is None else stages
    lock_shipped = locked(root)
    rows: list[Row] = []
    for name in order:
        if name not in ran:
            rows.append(Row(name, "(stage not rebuilt)", "", "", None))
            continue
        for out in all_stages[name].outs:
            committed = out in all_stages[name].committed
            shipped = (dvc_md5(root / out) if committed and (root / out).exists()
                       else lock_shipped.get(name, {}).get("outs", {}).get(out))
            rebuilt = dvc_md5(scratch / out) if (scratch / out).exists() else None
            same = shipped is not None and shipped == rebuilt
            judged = name in BYTE_EXACT or same
            where = "committed" if committed else "dvc.lock"
            rows.append(Row(name, f"{out} (md5, {where})", (shipped or "none")[:12], (rebuilt or "none")[:12],
                            same if judged else None, "same bytes" if same else
                            "differs (a seeded stage)" if name in BYTE_EXACT else "differs: its figures judge"))
        for (stage, rel), paths in HEADLINES.items():
            if stage != name:
                continue
            old, new = _load_json(root / rel), _load_json(scratch / rel)
            for path in paths:
                shipped_vals = dict(_expand(old, path))
                rebuilt_vals = dict(_expand(new, path))
                for key in sorted(set(shipped_vals) | set(rebuilt_vals)):
                    rows.append(compare_values(name, f"{rel}: {key}", shipped_vals.get(key), rebuilt_vals.get(key),
                                               TOLERANCE.get(name, 0.0)))
    return rows


def render(report: Report) -> str:
    """The report as Markdown: stage times, the comparison, the verdict."""
    lines = ["# make repro", "", f"scratch copy: `{report.scratch}`", ""]
    if report.runs:
        lines += ["| stage | seconds | exit |", "| --- | ---: | ---: |"]
        lines += [f"| {r.name} | {r.seconds:.0f} | {r.returncode} |" for r in report.runs]
        lines += [f"| **total** | {sum(r.seconds for r in report.runs):.0f} | |", ""]
    mark = {True: "yes", False: "**NO**", None: "–"}
    lines += ["| stage | artefact | shipped | rebuilt | within tolerance | note |",
              "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r.stage} | {r.artefact} | {r.shipped} | {r.rebuilt} | {mark[r.ok]} | {r.note} |" for r in report.rows]
    judged = [r for r in report.rows if r.ok is not None]
    lines += ["", f"{sum(1 for r in judged if r.ok)} of {len(judged)} judged lines within tolerance "
              f"(tolerances: {json.dumps(TOLERANCE)}; byte-exact: {', '.join(sorted(BYTE_EXACT))}).",
              f"real tree untouched (git status, dvc.lock): {mark[report.tree_untouched]}",
              f"verdict: {'reproduced' if report.passed else 'NOT reproduced'}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path.cwd(), help="the repository (default: here)")
    ap.add_argument("--stages", nargs="+", help="rebuild only these stages (on the shipped upstream outputs)")
    ap.add_argument("--scratch", type=Path, help="where to rebuild (default: a new temporary folder)")
    ap.add_argument("--resume", type=Path, metavar="SCRATCH",
                    help="go on with an interrupted rebuild: its stages that succeeded are kept, the rest run")
    ap.add_argument("--compare-only", type=Path, metavar="SCRATCH", help="compare an earlier rebuild again")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    stages = load_stages(root)
    order = stage_order(stages)
    unknown = sorted(set(args.stages or []) - set(order))
    if unknown:
        ap.error(f"unknown stage(s) {', '.join(unknown)}; dvc.yaml has {', '.join(order)}")
    if args.compare_only:
        report = Report(args.compare_only.resolve(), runs=earlier_runs(args.compare_only.resolve()))
        # a rebuild without time records (an older make repro's): the stages with a log
        report.rows = compare(root, report.scratch, [r.name for r in report.runs if r.returncode == 0] or None)
    else:
        before = tree_state(root)
        if args.resume:
            scratch = args.resume.resolve()
            done = {r.name: r for r in earlier_runs(scratch) if r.returncode == 0}
        else:
            scratch = (args.scratch or Path(tempfile.mkdtemp(prefix="agent-triage-repro-"))).resolve()
            scratch.mkdir(parents=True, exist_ok=True)
            scratch_copy(root, scratch)
            done = {}
        print(f"scratch copy: {scratch}", flush=True)
        report = Report(scratch, runs=[done[n] for n in order if n in done])
        env = stage_env(scratch)
        for name in [n for n in order if (not args.stages or n in args.stages) and n not in done]:
            print(f"{time.strftime('%H:%M:%S')} {name} ...", end=" ", flush=True)
            run = run_stage(scratch, name, env)
            report.runs.append(run)
            print(f"{run.seconds:.0f} s" + ("" if run.returncode == 0 else f", exit {run.returncode}: see {run.log}"),
                  flush=True)
            if run.returncode != 0:
                break
        report.rows = compare(root, scratch, [r.name for r in report.runs if r.returncode == 0])
        report.tree_untouched = tree_state(root) == before
    text = render(report)
    out = report.scratch / "repro.md"
    out.write_text(text, encoding="utf-8")
    print(text)
    print(f"written to {out}")
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())

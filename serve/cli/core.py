"""``triage diagnose``, ``triage serve`` and ``triage schema``."""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from fastapi.exceptions import RequestValidationError
from rich.markup import escape
from rich.table import Table

from model.core.errors import InputError, TriageError
from model.core.findings import DiagnosisResponse
from model.core.options import DiagnoseRequest
from model.core.schema import write_json_schema
from model.diagnosis.diagnoser import Diagnoser
from model.importers import FORMATS
from serve.cli.output import console, fail
from serve.intake import as_input_error, read_request, runs


def _split(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def _speakers(values: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values or []:
        name, sep, role = item.partition("=")
        if not sep or not name or not role:
            raise InputError(f"expected NAME=ROLE, got {item!r}", path="--speaker")
        out[name] = role
    return out


def _equivalents(values: list[str] | None) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for item in values or []:
        name, sep, alts = item.partition("=")
        if not sep or not name or not alts:
            raise InputError(f"expected TOOL=ALT1,ALT2, got {item!r}", path="--equivalent")
        out[name] = [a for a in alts.split(",") if a]
    return out


def _print_summary(resp: DiagnosisResponse, source: str) -> None:
    """The readable summary. Its words are the console's: a finding and the attribution are placed
    at a *step* (the trace's steps, what the run page numbers); the table's *message* column is the
    input's message it came from (``source_index``), the one an executor rolls back to."""
    out = console()
    if resp.healthy is None:
        status = "[yellow]unknown: no failure found, but content is missing[/yellow]"
    else:
        status = "[green]healthy[/green]" if resp.healthy else f"[red]{len(resp.failures)} failure(s)[/red]"
    # soft_wrap: the terminal wraps this line itself, so that a copied trace id has no line break in it
    out.print(f"[bold]{escape(source)}[/bold]: {resp.steps} steps, {status}  (trace {escape(resp.trace_id)})",
              soft_wrap=True)
    out.print(f"model {escape(resp.model_version)}", highlight=False)
    if resp.failure_probability is not None:
        where = ""
        if resp.attribution is not None:
            a = resp.attribution
            who = f", {escape(a.speaker)}" if a.speaker else ""
            where = (f"; if it failed, most likely at step {a.step} (message {a.source_index}{who}), "
                     f"with probability {a.probability:.2f}")
        out.print(f"failure probability {resp.failure_probability:.2f}{where}")
    for warning in resp.warnings:
        out.print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False)
    if resp.failures or resp.signals:
        table = Table(show_lines=False)
        for col in ("", "kind", "severity", "conf.", "step", "message", "detector"):
            table.add_column(col, no_wrap=col != "detector")
        evidence: list[str] = []
        for mark, items in (("●", resp.failures), ("○", resp.signals)):
            for f in items:
                primary = resp.primary is not None and f is resp.primary
                table.add_row(
                    "★" if primary else mark,
                    f.kind.value,
                    f.severity.value,
                    f"{f.confidence:.2f}",
                    "" if f.step is None else str(f.step),
                    "" if f.source_index is None else str(f.source_index),
                    ",".join(f.detectors or [f.detector]),
                )
                text = " ".join(f.evidence.split())
                at = "the run" if f.step is None else f"step {f.step}"
                evidence.append(f"  {f.kind.value}, {at}: {text[:200] + '…' if len(text) > 200 else text}")
        out.print(table)
        out.print("step: its place among the trace's steps; message: the input message it came from",
                  highlight=False)
        out.print("[bold]evidence[/bold] (● failure, ○ signal, ★ primary):")
        for line in evidence:
            out.print(escape(line), highlight=False)
    rec = resp.recommendation
    nxt = " → ".join(s.value for s in rec.next)
    out.print(f"[bold]recommendation:[/bold] {rec.strategy.value}" + (f"  (then {nxt})" if nxt else ""))
    if rec.instruction:
        out.print(f"  {escape(rec.instruction)}", highlight=False)


def diagnose(
    file: Annotated[
        str | None, typer.Argument(metavar="FILE", show_default=False,
                                   help="The trace file (JSON or JSON lines), or - for standard input.")
    ] = None,
    jsonl: Annotated[
        Path | None,
        typer.Option("--jsonl", metavar="FILE", help="An archive to diagnose: one trace per line in, one JSON response per line out."),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", metavar="FILE", help="With --jsonl: write the responses to this file (default: standard output).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole response as JSON instead of a summary.")] = False,
    fmt: Annotated[str, typer.Option("--format", help=f"Input format: {', '.join(('auto', *FORMATS))}.", metavar="FORMAT")] = "auto",
    allowed_tools: Annotated[
        list[str] | None, typer.Option("--allowed-tools", help="The tools the agent may call, comma-separated.",
                                           metavar="TOOL,TOOL")
    ] = None,
    equivalent: Annotated[
        list[str] | None, typer.Option("--equivalent", metavar="TOOL=ALT,ALT",
                                           help="Tools that can stand in for TOOL, for a switch_tool repair (repeatable).")
    ] = None,
    fallback_model: Annotated[
        list[str] | None, typer.Option("--fallback-model", metavar="MODEL",
                                           help="A model to switch to, in order of preference (repeatable).")
    ] = None,
    detectors: Annotated[
        list[str] | None, typer.Option("--detectors", metavar="NAME,NAME",
                                           help="Only these detectors, comma-separated (default: all).")
    ] = None,
    speaker: Annotated[
        list[str] | None, typer.Option("--speaker", metavar="NAME=ROLE",
                                           help="In a multi-agent log, the role of a speaker (repeatable).")
    ] = None,
    shadow: Annotated[bool, typer.Option("--shadow", help="Observe only: the recommendation is always 'continue'.")] = False,
    session: Annotated[
        str | None, typer.Option("--session", metavar="ID",
                                     help="Diagnose one session of a span file: its spans (and those naming no session) as one run.")
    ] = None,
    max_steps: Annotated[int, typer.Option("--max-steps", min=1, metavar="N", help="Refuse a trace longer than N steps.")] = 5000,
    classifier: Annotated[
        bool, typer.Option("--classifier/--no-classifier", help="Use the shipped step classifier as the service does (--no-classifier: rules and run scorer only).")
    ] = True,
) -> None:
    """Diagnose a trace file as the service does.

    FILE is read the way POST /v1/diagnose reads a request body: a bare trace (native, OpenAI
    messages, OpenTelemetry or OpenInference spans) or {"trace": ..., "options": ...}; the options
    given here win over those in the file. A file holding several runs gets one answer each. The
    models are the service's: the rules, the step classifier and the run scorer.

    Prints a summary (or the response as JSON with --json). With --jsonl, reads an archive with one
    trace per line and writes one JSON response per line.

    Exit code: 0 whether the run is healthy or not; 2 when the input cannot be read.
    """
    # the body is read by serve.intake, the same code as the HTTP route's
    try:
        given: dict[str, Any] = {
            "allowed_tools": _split(allowed_tools), "tool_equivalents": _equivalents(equivalent),
            "fallback_models": list(fallback_model or []), "detectors": _split(detectors), "shadow": shadow,
            "speakers": _speakers(speaker), "session": session,
        }
        options = {k: v for k, v in given.items() if v not in (None, False, [], {})}  # the flags given
        read = functools.partial(read_request, format=None if fmt == "auto" else fmt, options=options, override=True)
        diagnoser = Diagnoser.with_shipped_models(classifier=classifier, max_steps=max_steps)
        if jsonl is not None:
            if file is not None:
                raise InputError("give either FILE or --jsonl, not both")
            _diagnose_jsonl(diagnoser, jsonl, out, read, max_steps)
            return
        if file is None:
            raise InputError("missing FILE (a path, or - for standard input)")
        text = sys.stdin.buffer.read() if file == "-" else _read(Path(file))
        request = read(text)
        traces = runs(request, max_steps=max_steps)
        if not traces:
            raise InputError("the input holds no trace")
        responses = [diagnoser.diagnose(trace, request.options) for trace in traces]
        if as_json:  # one JSON document: the response, or a list of them for a file of several runs
            if len(responses) == 1:
                typer.echo(responses[0].model_dump_json(indent=2))
            else:
                typer.echo(json.dumps([r.model_dump(mode="json") for r in responses], indent=2))
        else:
            for resp in responses:
                _print_summary(resp, "stdin" if file == "-" else file)
    except RequestValidationError as exc:
        raise fail(str(as_input_error(exc))) from None
    except TriageError as exc:
        raise fail(str(exc)) from None


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise InputError("no such file", path=str(path)) from None
    except IsADirectoryError:
        raise InputError("is a folder; use `triage diagnose --jsonl` or one file", path=str(path)) from None
    except OSError as exc:
        raise InputError(exc.strerror or "cannot read", path=str(path)) from None


def _diagnose_jsonl(
    diagnoser: Diagnoser, path: Path, out: Path | None, read: Callable[[bytes], DiagnoseRequest], max_steps: int
) -> None:
    """One response per run of each input line (each line read as a body, :mod:`serve.intake`); an
    unreadable line gets an error record, and exit 2 at the end."""
    bad = 0
    total = 0
    try:
        src = path.open("rb")
    except OSError as exc:
        raise InputError(exc.strerror or "cannot read", path=str(path)) from None
    sink = out.open("w", encoding="utf-8") if out else sys.stdout
    try:
        with src:
            for lineno, raw in enumerate(src, start=1):
                if not raw.strip():
                    continue
                total += 1
                try:
                    try:
                        request = read(raw.rstrip(b"\r\n"))  # the line, as a body
                    except RequestValidationError as exc:
                        raise as_input_error(exc) from None
                    for trace in runs(request, max_steps=max_steps):
                        resp = diagnoser.diagnose(trace, request.options)
                        sink.write(resp.model_dump_json() + "\n")
                except InputError as exc:
                    bad += 1
                    exc.line = lineno
                    sink.write(json.dumps({"line": lineno, "error": str(exc)}, ensure_ascii=False) + "\n")
    finally:
        if out:
            sink.close()
    if bad:
        raise InputError(f"{bad} of {total} lines could not be read (error records written)", path=str(path))


def _port_in_use(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on (None: it can), found by binding it a moment, as uvicorn
    will (``SO_REUSEADDR``, so a port in TIME_WAIT is free): a clear message instead of uvicorn's
    ``[Errno 98]`` after start-up."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as e:
        return f"the address does not resolve ({e.strerror or e})"
    family, _, _, _, sockaddr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(sockaddr)
        except OSError as e:
            return e.strerror or str(e)
    return None


def serve(
    host: Annotated[str | None, typer.Option(
        metavar="ADDRESS", help="The address to listen on (default: TRIAGE_HOST, else 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(
        metavar="PORT", help="The port to listen on (default: TRIAGE_PORT, else 8000).")] = None,
    workers: Annotated[int | None, typer.Option(
        metavar="N", help="Worker processes (default: TRIAGE_WORKERS, else 1).")] = None,
) -> None:
    """Start the HTTP service and its console.

    This is what 'make run' starts, after printing the local API key.
    """
    import uvicorn

    from serve.ratetable import SharedTable
    from serve.settings import get_settings
    from serve.supervise import worker_cpus

    settings = get_settings()
    n_workers = workers or settings.workers
    addr, number = host or settings.host, port or settings.port
    busy = _port_in_use(addr, number)
    if busy is not None:
        raise fail(f"cannot listen on {addr}:{number}: {busy}. Another server is there, or choose another port: "
                   f"make run PORT={number + 1}  (or: triage serve --port {number + 1})")
    # The workers read their settings from the environment; several workers spend the request-rate
    # buckets of one shared table, made here before uvicorn starts them.
    os.environ["TRIAGE_WORKERS"] = str(n_workers)
    # each worker on a CPU of its own where this machine's CPUs are the server's (serve/supervise.py)
    os.environ["TRIAGE_WORKER_CPUS"] = ",".join(
        map(str, worker_cpus(settings.cpu_affinity, n_workers, settings.ort_threads)))
    table = SharedTable.create() if n_workers > 1 else None
    if table is not None:
        os.environ["TRIAGE_RATE_LIMIT_TABLE"] = table
    get_settings.cache_clear()  # a single worker is this process: its settings read what was set here
    # SIGTERM is a drain, not a failure: uvicorn shuts down gracefully, then raises the signal again
    # with the handler found before it (this one), and the process exits 0, as the master of several
    # workers does (serve/supervise.py drains each worker first).
    signal.signal(signal.SIGTERM, _exit_0)
    try:
        uvicorn.run(
            "serve.app:create_app",
            factory=True,
            host=addr,
            port=number,
            workers=n_workers,
            log_level="info",
            timeout_graceful_shutdown=max(1, round(settings.drain_timeout_s)),
            # a worker still importing and loading its models on a busy machine is not hung (uvicorn's 5 s
            # default restarted workers mid-start at a load of 6 on 2 cores)
            timeout_worker_healthcheck=30,
        )
    finally:
        if table is not None:
            SharedTable.remove(table)


def _exit_0(sig: int, frame: object) -> None:
    raise SystemExit(0)


def schema(
    path: Annotated[Path, typer.Argument(metavar="PATH", help="Where to write the schema.")] = Path(
        "docs/trace.schema.json"
    ),
) -> None:
    """Write the JSON Schema of a trace (the native format)."""
    write_json_schema(path)
    typer.echo(f"wrote {path}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command("diagnose")(diagnose)
    app.command("serve")(serve)
    app.command("schema")(schema)

"""``triage cusum`` and ``triage changepoints``: change detection over a CSV metric history.

Both read one numeric column of a CSV file with a header; indices in the output are 0-based
data rows (the header is not a row). Bad input is one ``error:`` line on stderr and exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from model.core.errors import InputError
from model.streams import Cusum, detect_changepoints, episodes, read_csv_column
from model.streams.changepoints import DEFAULT_MAX_POINTS, DEFAULT_PENALTY_C, METHODS


def _fail(exc: InputError) -> typer.Exit:
    typer.echo(f"error: {exc}", err=True)
    return typer.Exit(code=2)


def _emit(payload: dict[str, Any]) -> None:
    typer.echo(json.dumps(payload))


def cusum(
    file: Annotated[Path, typer.Argument(help="CSV file with a header line.")],
    column: Annotated[str, typer.Option("--column", "-c", help="Column to monitor.")],
    warmup: Annotated[
        int | None,
        typer.Option(help="Rows that seed the learnt baseline when --mean/--std are not given (default 100)."),
    ] = None,
    mean: Annotated[float | None, typer.Option(help="In-control mean (skips estimating it).")] = None,
    std: Annotated[float | None, typer.Option(help="In-control standard deviation.")] = None,
    shift: Annotated[float, typer.Option(help="Smallest shift worth catching, in sigma units.")] = 1.0,
    arl0: Annotated[float, typer.Option(help="Target in-control average run length (sets h).")] = 500.0,
    direction: Annotated[str, typer.Option(help="both, up or down.")] = "both",
) -> None:
    """Two-sided self-starting CUSUM over a column, one alarm per change: prints {"alarms": [{"index",
    "direction", "start", "statistic", "mean", "std", "bound", "closed"}]} ("closed": the row at which
    the chart came back to 0 and the alarm's episode closed, null while it is open)."""
    try:
        if warmup is not None and mean is not None and std is not None:
            raise InputError("give --warmup, or --mean and --std, not all three")
        params: dict[str, Any] = {"shift": shift, "arl0": arl0, "mean": mean, "std": std, "direction": direction}
        if warmup is not None:
            params["warmup"] = warmup
        det = Cusum(**params)  # checks the settings before the file is read
        values = read_csv_column(file, column)
        alarms = [{**a.model_dump(), "closed": closed} for a, closed in episodes(values, **params)]
    except InputError as exc:
        raise _fail(exc) from None
    if not det.monitoring and len(values) < det.warmup:
        typer.echo(
            f"note: only {len(values)} rows; the {det.warmup}-row warm-up did not finish, nothing was monitored",
            err=True,
        )
    _emit({"alarms": alarms})


def changepoints(
    file: Annotated[Path, typer.Argument(help="CSV file with a header line.")],
    column: Annotated[str, typer.Option("--column", "-c", help="Column to segment.")],
    method: Annotated[
        str | None, typer.Option(help="pelt, binseg or window (default binseg; pelt with --exact).")
    ] = None,
    exact: Annotated[bool, typer.Option(help="Exact Pelt (jump=1): slow, for offline dating.")] = False,
    min_size: Annotated[int, typer.Option(help="Shortest segment.")] = 5,
    penalty_c: Annotated[float, typer.Option(help="c in the penalty c * sigma^2 * log n.")] = DEFAULT_PENALTY_C,
    window: Annotated[
        int, typer.Option(help="Search only the last N rows (0: all); indices still count from row 0.")
    ] = DEFAULT_MAX_POINTS,
) -> None:
    """Offline change points (ruptures, l2): prints {"changepoints": [...], "segments": [{"start", "end", "mean"}]}."""
    try:
        if method is not None and method not in METHODS:
            raise InputError(f"--method must be one of {', '.join(METHODS)}; got {method!r}")
        if window < 0 or window == 1:
            raise InputError(f"--window must be 0 (all rows) or at least 2; got {window}")
        values = read_csv_column(file, column)
        result = detect_changepoints(
            values,
            method=method,  # type: ignore[arg-type]
            exact=exact,
            min_size=min_size,
            c=penalty_c,
            max_points=window or None,
        )
    except InputError as exc:
        raise _fail(exc) from None
    _emit(
        {
            "changepoints": result.changepoints,
            "segments": [s.model_dump() for s in result.segments],
        }
    )


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command("cusum")(cusum)
    app.command("changepoints")(changepoints)

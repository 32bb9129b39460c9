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
from serve.cli.output import fail


def _emit(payload: dict[str, Any]) -> None:
    typer.echo(json.dumps(payload))


def cusum(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="A CSV file with a header line.")],
    column: Annotated[str, typer.Option("--column", "-c", metavar="NAME", help="The column to watch.")],
    warmup: Annotated[
        int | None,
        typer.Option(metavar="N", help="Learn the usual mean and spread from the first N rows, when --mean "
                                       "and --std are not given (default 100)."),
    ] = None,
    mean: Annotated[float | None, typer.Option(metavar="MEAN", help="The usual mean (instead of learning it).")]
    = None,
    std: Annotated[float | None, typer.Option(
        metavar="STD", help="The usual standard deviation (instead of learning it).")] = None,
    shift: Annotated[float, typer.Option(
        metavar="SIGMAS", help="The smallest shift worth an alarm, in standard deviations.")] = 1.0,
    arl0: Annotated[float, typer.Option(
        metavar="ROWS", help="Rows between false alarms, on average, while nothing changes (sets the alarm "
                             "threshold).")] = 500.0,
    direction: Annotated[str, typer.Option(metavar="DIRECTION", help="both, up or down.")] = "both",
) -> None:
    """Watch a CSV column for a shift in its mean (CUSUM).

    Prints one JSON object, {"alarms": [...]}: one alarm per change, with its row (index, counted
    from 0 over the data rows), its direction, the row where the change started (start), the
    chart's statistic and bound at the alarm, the mean and std it was measured against, and the row
    at which the chart came back to 0 (closed; null while the change lasts). Up and down shifts
    are both watched unless --direction says otherwise.
    """
    # a two-sided, self-starting CUSUM: model.streams.cusum
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
        raise fail(str(exc)) from None
    if not det.monitoring and len(values) < det.warmup:
        typer.echo(
            f"note: only {len(values)} rows; the {det.warmup}-row warm-up did not finish, nothing was monitored",
            err=True,
        )
    _emit({"alarms": alarms})


def changepoints(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="A CSV file with a header line.")],
    column: Annotated[str, typer.Option("--column", "-c", metavar="NAME", help="The column to segment.")],
    method: Annotated[
        str | None, typer.Option(metavar="METHOD",
                                 help="pelt, binseg or window (default: binseg; pelt with --exact).")
    ] = None,
    exact: Annotated[bool, typer.Option(
        help="The exact optimum (Pelt, every row a candidate): slow, about 12 s at 2,000 rows.")] = False,
    min_size: Annotated[int, typer.Option(metavar="ROWS", help="The shortest segment.")] = 5,
    penalty_c: Annotated[float, typer.Option(
        metavar="C", help="Each change point costs C × noise variance × log(rows): a larger C finds fewer.")]
    = DEFAULT_PENALTY_C,
    window: Annotated[
        int, typer.Option(metavar="N", help="Search only the last N rows (0: all); rows still count from 0.")
    ] = DEFAULT_MAX_POINTS,
) -> None:
    """Find where a CSV column's mean changed, after the fact.

    Prints one JSON object: {"changepoints": [ROW, ...], "segments": [{"start", "end", "mean"}, ...]},
    rows counted from 0 over the data rows (the header is not a row).
    """
    # offline change points with ruptures (least-squares cost): model.streams.changepoints
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
        raise fail(str(exc)) from None
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

"""Reading a metric history from a CSV file (the ``triage cusum`` / ``triage changepoints`` input).

The file has a header; data rows are numbered from 0 (the header is not a row). Errors name the
file line, 1-based, with the header on line 1 and the first data row on line 2.

>>> import pathlib, tempfile
>>> p = pathlib.Path(tempfile.mkdtemp()) / "m.csv"
>>> _ = p.write_text("t,latency\\n0,120\\n1,135.5\\n")
>>> read_csv_column(p, "latency").tolist()
[120.0, 135.5]
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from model.core.errors import InputError


def read_csv_column(path: Path | str, column: str) -> NDArray[np.float64]:
    """The numeric values of ``column`` in the CSV file at ``path``, one per data row.

    Blank lines are skipped (they are not rows).

    Raises
    ------
    InputError
        The file is missing or unreadable, has no header, lacks ``column`` (the message lists
        the columns), or a row has no value / a non-numeric or non-finite value for it
        (``line`` is the 1-based file line).
    """
    p = Path(path)
    try:
        handle = p.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {p}: {exc.strerror or exc}") from exc
    values: list[float] = []
    with handle:
        reader = csv.reader(handle)
        try:
            header = next(reader, None)
            if header is None or not any(h.strip() for h in header):
                raise InputError(f"{p} is empty: expected a header line", line=1)
            names = [h.strip() for h in header]
            if column not in names:
                raise InputError(
                    f"no column {column!r} in {p}; columns: {', '.join(names)}", line=reader.line_num
                )
            col = names.index(column)
            for row in reader:
                if not row or all(not cell.strip() for cell in row):
                    continue
                line = reader.line_num
                if col >= len(row):
                    raise InputError(
                        f"column {column!r}: the row has {len(row)} fields, the header {len(names)}",
                        line=line,
                    )
                cell = row[col].strip()
                if not cell:
                    raise InputError(f"column {column!r}: empty value", line=line)
                try:
                    value = float(cell)
                except ValueError:
                    raise InputError(f"column {column!r}: expected a number, got {cell!r}", line=line) from None
                if not math.isfinite(value):
                    raise InputError(f"column {column!r}: expected a finite number, got {cell!r}", line=line)
                values.append(value)
        except UnicodeDecodeError as exc:
            raise InputError(f"{p} is not UTF-8 text: {exc.reason}") from exc
        except csv.Error as exc:
            raise InputError(f"{p}: malformed CSV: {exc}", line=reader.line_num) from exc
    if not values:
        raise InputError(f"{p} has no data rows for column {column!r}")
    return np.asarray(values, dtype=np.float64)


__all__ = ["read_csv_column"]

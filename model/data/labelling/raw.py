"""``datasets/raw/``: imported logs, kept as they came (immutable), with a manifest.

``import_logs(path)`` first reads the input with the importers (so a malformed file is rejected,
naming its line / field, before anything is copied), then copies the files under
``raw/<import id>/`` read-only and appends a record to ``raw/manifest.jsonl``: the id (a digest of
the content), where they came from, the format, each file's sha256, size and trace count.
Importing the same content twice is a no-op that returns the existing record.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from model.core.errors import InputError
from model.core.schema import Trace
from model.importers import read_path

MANIFEST = "manifest.jsonl"
_EXTS = (".json", ".jsonl")


@dataclass
class ImportRecord:
    id: str
    source: str
    format: str
    files: list[dict[str, Any]]
    traces: int
    speakers: dict[str, str] | None = None
    imported_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        fs = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in _EXTS)
        if not fs:
            raise InputError(f"no .json or .jsonl files in {path}", path=str(path))
        return fs
    if not path.exists():
        raise InputError(f"no such file or folder: {path}", path=str(path))
    return [path]


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def read_manifest(raw_dir: Path) -> list[ImportRecord]:
    m = raw_dir / MANIFEST
    if not m.exists():
        return []
    out = []
    for no, line in enumerate(m.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                out.append(ImportRecord(**json.loads(line)))
            except (ValueError, TypeError) as exc:
                raise InputError(f"bad manifest record: {exc}", path=str(m), line=no) from exc
    return out


def import_logs(path: Path, raw_dir: Path, *, format: str = "auto",
                speakers: dict[str, str] | None = None) -> tuple[ImportRecord, bool]:
    """Validate and copy ``path`` (file or folder) into ``raw_dir``; returns (record, newly added).

    Raises
    ------
    TraceImportError
        A file can't be read (its name, line and field path are in the message); nothing is copied.
    """
    files = _files(path)
    base = path if path.is_dir() else path.parent
    counts = []
    for f in files:
        counts.append(len(read_path(f, format=format, speakers=speakers)))  # raises naming file / line
    entries = [{"name": str(f.relative_to(base)), "sha256": _sha(f), "bytes": f.stat().st_size, "traces": n}
               for f, n in zip(files, counts, strict=True)]
    digest = hashlib.sha256(json.dumps(sorted((e["name"], e["sha256"]) for e in entries)).encode()).hexdigest()[:16]
    for rec in read_manifest(raw_dir):
        if rec.id == digest:
            return rec, False
    dest = raw_dir / digest
    dest.mkdir(parents=True, exist_ok=False)
    for f, e in zip(files, entries, strict=True):
        target = dest / str(e["name"])
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, target)
        target.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)  # raw data is immutable
    rec = ImportRecord(id=digest, source=str(path), format=format, files=entries, traces=sum(counts),
                       speakers=speakers)
    with (raw_dir / MANIFEST).open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(asdict(rec), ensure_ascii=False) + "\n")
    return rec, True


def load_raw(raw_dir: Path) -> list[tuple[ImportRecord, str, list[Trace]]]:
    """Every imported file's traces: ``(record, file name, traces)``; ids made stable from the
    import id, file and position, so labels (human ones too) keep pointing at the same trace."""
    out = []
    for rec in read_manifest(raw_dir):
        for e in rec.files:
            p = raw_dir / rec.id / e["name"]
            if _sha(p) != e["sha256"]:
                raise InputError(f"raw file changed since import (sha256 mismatch): {p}", path=str(p))
            traces = read_path(p, format=rec.format, speakers=rec.speakers)
            for k, t in enumerate(traces):
                t.id = f"raw-{rec.id}-{e['name']}-{k}"
                if t.session_id is None:
                    t.session_id = f"raw-{rec.id}-{e['name']}"
            out.append((rec, e["name"], traces))
    return out


__all__ = ["MANIFEST", "ImportRecord", "import_logs", "load_raw", "read_manifest"]

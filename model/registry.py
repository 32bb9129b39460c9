"""A registry of run scorers per tenant: ``<root>/<tenant>/<version>/``.

``triage retrain`` saves every challenger here; which version a tenant *serves* is recorded in the
store (``Store.active_model``; no row: the shipped model, :data:`SHIPPED_VERSION`). The root is the
setting ``TRIAGE_MODEL_REGISTRY`` (default ``<data_dir>/models``): several servers or workers need
it on a path they all reach (a shared volume), since each loads the artefact itself.

A version's folder::

    runscore.json       the artefact (RunScorer.to_dict(); RunScorer.load reads it)
    MODEL_CARD.md       what it was trained on and how it fared at the gate
    evaluation.json     the gate's figures (the ModelVersion's ``summary``)
    data.json           the data it saw: sha256 of every base file and of every tenant trace, counts
    version.json        tenant, version, parent, created_at and the artefact's sha256

Saving writes a temporary folder beside the final one and renames it (atomic on one file system),
so a reader never sees half a version; :meth:`Registry.load` checks the artefact's sha256.
Version names are ``v<N>-<YYYYMMDDTHHMMSSZ>`` (N = 1, 2, … per tenant).

>>> reg = Registry(Path("/tmp/models"))                                    # doctest: +SKIP
>>> mv = reg.save("acme", scorer, parent=None, card="…", report={}, data={})  # doctest: +SKIP
>>> reg.load("acme", mv.version).score(trace)                              # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from model.errors import InputError, ModelLoadError
from model.runscore.model import ARTIFACT, RunScorer


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _shipped_version() -> str:
    try:
        return f"shipped-{_sha256(ARTIFACT)[:12]}"
    except OSError:
        return "shipped-missing"


#: The version name of the shipped run scorer (``model/artifacts/runscore.json``).
SHIPPED_VERSION: str = _shipped_version()

ARTEFACT_FILE = "runscore.json"
CARD_FILE = "MODEL_CARD.md"
REPORT_FILE = "evaluation.json"
DATA_FILE = "data.json"
VERSION_FILE = "version.json"

_VERSION_RE = re.compile(r"^v(\d+)-(\d{8}T\d{6}Z)$")
_TENANT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")  # as serve.store.check_tenant_name


def _tenant(name: str) -> str:
    if not _TENANT_RE.match(name):
        raise InputError(f"a tenant name is 1-64 letters, digits, '_', '.', '-' and starts with a letter or digit; "
                         f"got {name!r}", path="tenant")
    return name


@dataclass(frozen=True)
class ModelVersion:
    """One registered run scorer of a tenant."""

    tenant: str
    version: str
    path: Path                       # its folder (the shipped one: model/artifacts)
    created_at: str                  # ISO 8601, UTC
    parent: str | None               # the champion it was trained over
    summary: dict[str, Any] = field(default_factory=dict)   # the gate's figures, data hashes, counts


class Registry:
    """The run scorers of every tenant under ``root`` (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    # ---- reading ----------------------------------------------------------------------------

    def shipped(self, tenant: str = "local") -> ModelVersion:
        """The shipped model as a version (what a tenant without an activation serves)."""
        return ModelVersion(tenant, SHIPPED_VERSION, ARTIFACT.parent, "", None, {"shipped": True})

    def versions(self, tenant: str) -> list[ModelVersion]:
        """The tenant's registered versions, oldest first (the shipped model is not listed)."""
        folder = self.root / _tenant(tenant)
        if not folder.is_dir():
            return []
        found = []
        for d in folder.iterdir():
            m = _VERSION_RE.match(d.name)
            if m and d.is_dir():
                found.append((int(m.group(1)), d.name))
        return [self.get(tenant, name) for _, name in sorted(found)]

    def get(self, tenant: str, version: str) -> ModelVersion:
        """The version's record; :class:`InputError` naming the known versions when there is none."""
        if version == SHIPPED_VERSION:
            return self.shipped(tenant)
        d = self._dir(tenant, version)
        try:
            meta = json.loads((d / VERSION_FILE).read_text(encoding="utf-8"))
            summary = json.loads((d / REPORT_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            known = [v.name for v in sorted((self.root / tenant).glob("v*")) if _VERSION_RE.match(v.name)] \
                if (self.root / tenant).is_dir() else []
            raise InputError(f"tenant {tenant!r} has no model version {version!r} in {self.root} "
                             f"(known: {', '.join(known) or 'none'}; shipped: {SHIPPED_VERSION})",
                             path="version") from None
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"{d}: unreadable version record ({exc})") from exc
        return ModelVersion(tenant, version, d, str(meta.get("created_at", "")), meta.get("parent"),
                            summary if isinstance(summary, dict) else {})

    def load(self, tenant: str, version: str) -> RunScorer:
        """The version's run scorer (numpy only; no torch). :class:`ModelLoadError` when the artefact
        is missing, corrupt (its sha256 differs from the one recorded at save) or not a run scorer."""
        if version == SHIPPED_VERSION:
            try:
                return RunScorer.load(ARTIFACT)
            except InputError as exc:
                raise ModelLoadError(str(exc)) from exc
        mv = self.get(tenant, version)
        art = mv.path / ARTEFACT_FILE
        try:
            raw = art.read_bytes()
            meta = json.loads((mv.path / VERSION_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"{art}: cannot read ({exc})") from exc
        if hashlib.sha256(raw).hexdigest() != meta.get("sha256"):
            raise ModelLoadError(f"{art}: sha256 differs from the one recorded at save (corrupt or edited)")
        try:
            return RunScorer.from_dict(json.loads(raw))
        except (ValueError, KeyError, TypeError, InputError) as exc:
            raise ModelLoadError(f"{art}: not a run scorer ({exc})") from exc

    # ---- writing ----------------------------------------------------------------------------

    def save(self, tenant: str, scorer: RunScorer, *, parent: str | None, card: str, report: dict[str, Any],
             data: dict[str, Any]) -> ModelVersion:
        """Register ``scorer`` as the tenant's next version (atomic: a temp folder renamed into place)."""
        folder = self.root / _tenant(tenant)
        folder.mkdir(parents=True, exist_ok=True)
        body = (json.dumps(scorer.to_dict(), indent=1, sort_keys=True) + "\n").encode()
        tmp = Path(tempfile.mkdtemp(prefix=".incoming-", dir=folder))
        try:
            for _ in range(100):
                now = datetime.now(UTC)
                n = 1 + max((int(m.group(1)) for d in folder.iterdir() if (m := _VERSION_RE.match(d.name))),
                            default=0)
                version = f"v{n}-{now.strftime('%Y%m%dT%H%M%SZ')}"
                created = now.isoformat(timespec="seconds").replace("+00:00", "Z")
                meta = {"tenant": tenant, "version": version, "parent": parent, "created_at": created,
                        "sha256": hashlib.sha256(body).hexdigest(), "scorer": scorer.version}
                (tmp / ARTEFACT_FILE).write_bytes(body)
                (tmp / CARD_FILE).write_text(card, encoding="utf-8")
                (tmp / REPORT_FILE).write_text(json.dumps(report, indent=1, sort_keys=True, default=str) + "\n",
                                               encoding="utf-8")
                (tmp / DATA_FILE).write_text(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n",
                                             encoding="utf-8")
                (tmp / VERSION_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n", encoding="utf-8")
                for f in tmp.iterdir():
                    with f.open("rb") as fh:
                        os.fsync(fh.fileno())
                try:
                    os.rename(tmp, folder / version)  # fails if another writer took the name
                except OSError:
                    continue
                return ModelVersion(tenant, version, folder / version, created, parent, report)
            raise ModelLoadError(f"{folder}: could not find a free version name")
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def _dir(self, tenant: str, version: str) -> Path:
        if not _VERSION_RE.match(version):
            raise InputError(f"a model version looks like v3-20261201T120000Z or {SHIPPED_VERSION}; got {version!r}",
                             path="version")
        return self.root / _tenant(tenant) / version


__all__ = ["SHIPPED_VERSION", "ModelVersion", "Registry"]

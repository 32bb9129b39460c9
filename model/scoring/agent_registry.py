"""A registry of agent models per tenant and agent: ``<root>/<tenant>/agents/<agent key>/<version>/``.

``triage retrain`` saves every challenger here (:class:`~model.scoring.agentmodel.model.AgentModel`, one per
agent with enough labelled runs, and the tenant's pooled one under :data:`POOLED`); which version a
(tenant, agent) *serves* is recorded in the store (``ActivationStore.active_model(tenant, agent)``; no row:
zero-shot, the shipped run scorer). The root is the setting ``TRIAGE_MODEL_REGISTRY`` (default
``<data_dir>/models``): several servers or workers need it on a path they all reach (a shared
volume), since each loads the artefact itself.

The agent key is the agent's name made a safe folder name plus a hash of the name (two names never
share a folder); ``version.json`` keeps the name itself. A version's folder::

    agentmodel.json     the artefact (AgentModel.to_dict(); AgentModel.from_dict reads it)
    MODEL_CARD.md       what it was trained on, the gate, the learning curve so far
    evaluation.json     the gate's figures (the ModelVersion's ``summary``)
    data.json           the data it saw: sha256 of every trace, labels' counts
    version.json        tenant, agent, version, parent, created_at, the artefact's sha256, members
    where.json          (when ``triage retrain`` kept one) the agent's where-model, which serves its
                        ``attribution`` (WhereModel.to_dict(); its sha256 in version.json)

A version's ``agentmodel.json`` holds an :class:`~model.scoring.agentmodel.model.AgentModel` or, when
``triage retrain`` measured a cheap learner better, a :class:`~model.scoring.agentmodel.cheap.CheapModel`
(format ``cheapmodel/1``); :meth:`Registry.load` reads either. Each retrain's record (every agent fitted,
pooled or refused, with its code) is ``<root>/<tenant>/retrains/<UTC time>.json``
(:meth:`Registry.save_retrain`, :meth:`Registry.retrains`): JSON files, no table, no migration.

Saving writes a temporary folder beside the final one and renames it (atomic on one file system),
so a reader never sees half a version; :meth:`Registry.load` checks the artefact's sha256.
Version names are ``v<N>-<YYYYMMDDTHHMMSSZ>`` (N = 1, 2, … per tenant and agent).

>>> reg = Registry(Path("/tmp/models"))                                            # doctest: +SKIP
>>> mv = reg.save("acme", "billing", model, parent=None, card="…", report={}, data={})  # doctest: +SKIP
>>> reg.load("acme", "billing", mv.version).score(trace)                          # doctest: +SKIP
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
from typing import TYPE_CHECKING, Any, TypeAlias

from model.core.errors import InputError, ModelLoadError
from model.scoring.runscore.model import ARTIFACT

if TYPE_CHECKING:
    from model.scoring.agentmodel.cheap import CheapModel
    from model.scoring.agentmodel.model import AgentModel
    from model.scoring.agentmodel.where import WhereModel

#: What a registered version serves (:meth:`Registry.load` returns it, :meth:`Registry.save` takes it):
#: the agent's own :class:`~model.scoring.agentmodel.model.AgentModel`, or the
#: :class:`~model.scoring.agentmodel.cheap.CheapModel` its gate measured better. A string alias, so that
#: importing the registry loads neither model module.
Servable: TypeAlias = "AgentModel | CheapModel"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _shipped_version() -> str:
    try:
        return f"shipped-{_sha256(ARTIFACT)[:12]}"
    except OSError:
        return "shipped-missing"


#: The version name of the shipped run scorer (``model/artifacts/runscore.json``): zero-shot.
SHIPPED_VERSION: str = _shipped_version()
#: The version an activation names to answer an agent zero-shot again (a rollback past its first model).
ZERO_SHOT = "zero-shot"
#: The agent key of a tenant's pooled model (the agents with too few labelled runs of their own).
POOLED = "_pooled"

ARTEFACT_FILE = "agentmodel.json"
CARD_FILE = "MODEL_CARD.md"
REPORT_FILE = "evaluation.json"
DATA_FILE = "data.json"
WHERE_FILE = "where.json"
VERSION_FILE = "version.json"
#: The folder (under the tenant's) of ``triage retrain``'s records.
RETRAINS = "retrains"

_VERSION_RE = re.compile(r"^v(\d+)-(\d{8}T\d{6}Z)$")
_TENANT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")  # as serve.store.check_tenant_name
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")


def _tenant(name: str) -> str:
    if not _TENANT_RE.match(name):
        raise InputError(f"a tenant name is 1-64 letters, digits, '_', '.', '-' and starts with a letter or digit; "
                         f"got {name!r}", path="tenant")
    return name


def agent_key(agent: str) -> str:
    """The folder of ``agent``'s versions: its name made safe (48 characters at most) + 10 hex of its sha256."""
    if not agent or len(agent) > 200:
        raise InputError(f"an agent name is 1-200 characters; got {agent!r}", path="agent")
    safe = _UNSAFE.sub("_", agent)[:48].lstrip(".") or "agent"
    return f"{safe}-{hashlib.sha256(agent.encode()).hexdigest()[:10]}"


@dataclass(frozen=True)
class ModelVersion:
    """One registered agent model of a tenant."""

    tenant: str
    agent: str
    version: str
    path: Path                       # its folder
    created_at: str                  # ISO 8601, UTC
    parent: str | None               # the champion it was gated against
    summary: dict[str, Any] = field(default_factory=dict)   # the gate's figures, counts
    members: tuple[str, ...] = ()    # a pooled model: the agents it was trained on and serves

    def card(self, limit: int | None = None) -> str | None:
        """The version's model card (Markdown, as :meth:`Registry.save` wrote it), or None when the folder
        has none; at most ``limit`` characters when ``limit`` is given."""
        path = self.path / CARD_FILE
        if not path.is_file():
            return None
        text = path.read_text(encoding="utf-8")
        return text if limit is None else text[:limit]


class Registry:
    """The agent models of every tenant under ``root`` (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    # ---- reading ----------------------------------------------------------------------------

    def agents(self, tenant: str) -> list[str]:
        """The agents of ``tenant`` with at least one registered version (names, sorted)."""
        folder = self.root / _tenant(tenant) / "agents"
        if not folder.is_dir():
            return []
        names = set()
        for d in folder.iterdir():
            for v in d.iterdir() if d.is_dir() else []:
                if _VERSION_RE.match(v.name) and (v / VERSION_FILE).is_file():
                    try:
                        names.add(str(json.loads((v / VERSION_FILE).read_text(encoding="utf-8"))["agent"]))
                    except (OSError, ValueError, KeyError):
                        continue
                    break
        return sorted(names)

    def versions(self, tenant: str, agent: str) -> list[ModelVersion]:
        """The agent's registered versions, oldest first."""
        folder = self._agent_dir(tenant, agent)
        if not folder.is_dir():
            return []
        found = []
        for d in folder.iterdir():
            m = _VERSION_RE.match(d.name)
            if m and d.is_dir():
                found.append((int(m.group(1)), d.name))
        return [self.get(tenant, agent, name) for _, name in sorted(found)]

    def get(self, tenant: str, agent: str, version: str) -> ModelVersion:
        """The version's record; :class:`InputError` naming the known versions when there is none."""
        d = self._dir(tenant, agent, version)
        try:
            meta = json.loads((d / VERSION_FILE).read_text(encoding="utf-8"))
            summary = json.loads((d / REPORT_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            known = [v.version for v in self.versions(tenant, agent)]
            raise InputError(f"tenant {tenant!r} has no model version {version!r} of agent {agent!r} in {self.root} "
                             f"(known: {', '.join(known) or 'none'})", path="version") from None
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"{d}: unreadable version record ({exc})") from exc
        return ModelVersion(tenant, agent, version, d, str(meta.get("created_at", "")), meta.get("parent"),
                            summary if isinstance(summary, dict) else {}, tuple(meta.get("members") or ()))

    def load(self, tenant: str, agent: str, version: str) -> Servable:
        """The version's model (numpy / scipy only): an :class:`AgentModel`, or the
        :class:`~model.scoring.agentmodel.cheap.CheapModel` the gate measured better. :class:`ModelLoadError`
        when the artefact is missing, corrupt (its sha256 differs from the one recorded at save) or neither."""
        from model.scoring.agentmodel.cheap import FORMAT as CHEAP_FORMAT
        from model.scoring.agentmodel.cheap import CheapModel
        from model.scoring.agentmodel.model import AgentModel

        mv = self.get(tenant, agent, version)
        art = mv.path / ARTEFACT_FILE
        try:
            raw = art.read_bytes()
            meta = json.loads((mv.path / VERSION_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"{art}: cannot read ({exc})") from exc
        if hashlib.sha256(raw).hexdigest() != meta.get("sha256"):
            raise ModelLoadError(f"{art}: sha256 differs from the one recorded at save (corrupt or edited)")
        try:
            d = json.loads(raw)
            if isinstance(d, dict) and d.get("format") == CHEAP_FORMAT:
                return CheapModel.from_dict(d)
            return AgentModel.from_dict(d)
        except (ValueError, KeyError, TypeError, InputError) as exc:
            raise ModelLoadError(f"{art}: not an agent model ({exc})") from exc

    def load_where(self, tenant: str, agent: str, version: str) -> WhereModel | None:
        """The version's where-model (``None``: the retrain kept none); :class:`ModelLoadError` when its
        file is unreadable, corrupt (sha256) or not a where-model."""
        from model.scoring.agentmodel.where import WhereModel

        mv = self.get(tenant, agent, version)
        path = mv.path / WHERE_FILE
        try:
            meta = json.loads((mv.path / VERSION_FILE).read_text(encoding="utf-8"))
            if "where_sha256" not in meta:
                return None
            raw = path.read_bytes()
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"{path}: cannot read ({exc})") from exc
        if hashlib.sha256(raw).hexdigest() != meta["where_sha256"]:
            raise ModelLoadError(f"{path}: sha256 differs from the one recorded at save (corrupt or edited)")
        try:
            return WhereModel.from_dict(json.loads(raw))
        except (ValueError, KeyError, TypeError, InputError) as exc:
            raise ModelLoadError(f"{path}: not a where model ({exc})") from exc

    # ---- writing ----------------------------------------------------------------------------

    def save(self, tenant: str, agent: str, model: Servable, *, parent: str | None, card: str,
             report: dict[str, Any], data: dict[str, Any], members: tuple[str, ...] = (),
             where: dict[str, Any] | None = None) -> ModelVersion:
        """Register ``model`` as the agent's next version (atomic: a temp folder renamed into place);
        ``where``: the agent's where-model (``WhereModel.to_dict()``), saved beside it."""
        folder = self._agent_dir(tenant, agent)
        folder.mkdir(parents=True, exist_ok=True)
        body = (json.dumps(model.to_dict(), sort_keys=True) + "\n").encode()
        where_body = None if where is None else (json.dumps(where, sort_keys=True) + "\n").encode()
        tmp = Path(tempfile.mkdtemp(prefix=".incoming-", dir=folder))
        try:
            for _ in range(100):
                now = datetime.now(UTC)
                n = 1 + max((int(m.group(1)) for d in folder.iterdir() if (m := _VERSION_RE.match(d.name))),
                            default=0)
                version = f"v{n}-{now.strftime('%Y%m%dT%H%M%SZ')}"
                created = now.isoformat(timespec="seconds").replace("+00:00", "Z")
                meta = {"tenant": tenant, "agent": agent, "version": version, "parent": parent, "created_at": created,
                        "sha256": hashlib.sha256(body).hexdigest(), "model": model.version, "members": list(members)}
                if where_body is not None:
                    meta["where_sha256"] = hashlib.sha256(where_body).hexdigest()
                    (tmp / WHERE_FILE).write_bytes(where_body)
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
                return ModelVersion(tenant, agent, version, folder / version, created, parent, report, members)
            raise ModelLoadError(f"{folder}: could not find a free version name")
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def adopt(self, tenant: str, old: str, new: str) -> list[str]:
        """Copy ``old``'s registered versions to ``new`` (an agent renamed or merged: the store's
        activations move to ``new``, so its versions must be found there); a version ``new``
        already has is left as it is. Returns the versions copied. The artefacts are copied whole
        (their sha256 still holds); ``old``'s folder stays."""
        src = self._agent_dir(tenant, old)
        if not src.is_dir():
            return []
        dst = self._agent_dir(tenant, new)
        dst.mkdir(parents=True, exist_ok=True)
        copied = []
        for d in sorted(src.iterdir()):
            if _VERSION_RE.match(d.name) and d.is_dir() and not (dst / d.name).exists():
                tmp = Path(tempfile.mkdtemp(prefix=".incoming-", dir=dst))
                try:
                    shutil.copytree(d, tmp, dirs_exist_ok=True)
                    os.rename(tmp, dst / d.name)
                    copied.append(d.name)
                except OSError:
                    continue  # another worker adopted it meanwhile
                finally:
                    if tmp.exists():
                        shutil.rmtree(tmp, ignore_errors=True)
        return copied
    # ---- retrain records ---------------------------------------------------------------------

    def save_retrain(self, tenant: str, record: dict[str, Any]) -> Path:
        """Keep one ``triage retrain``'s record (every agent: fitted, pooled or refused with its code) as
        ``<root>/<tenant>/retrains/<UTC time>.json`` (written beside, then renamed: atomic)."""
        folder = self.root / _tenant(tenant) / RETRAINS
        folder.mkdir(parents=True, exist_ok=True)
        body = json.dumps(record, indent=1, sort_keys=True, default=str) + "\n"
        for k in range(100):
            path = folder / f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%fZ')}-{k}.json"
            if path.exists():
                continue
            tmp = folder / f".{path.name}.tmp"
            tmp.write_text(body, encoding="utf-8")
            os.replace(tmp, path)
            return path
        raise ModelLoadError(f"{folder}: could not find a free record name")

    def retrains(self, tenant: str, limit: int = 10) -> list[dict[str, Any]]:
        """The tenant's last ``limit`` retrain records, newest first (unreadable ones skipped: a record
        is a report, not state)."""
        folder = self.root / _tenant(tenant) / RETRAINS
        if not folder.is_dir():
            return []
        out = []
        for path in sorted((p for p in folder.iterdir() if p.suffix == ".json" and not p.name.startswith(".")),
                           reverse=True):
            try:
                rec = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(rec, dict):
                out.append(rec)
            if len(out) >= limit:
                break
        return out

    def _agent_dir(self, tenant: str, agent: str) -> Path:
        return self.root / _tenant(tenant) / "agents" / agent_key(agent)

    def _dir(self, tenant: str, agent: str, version: str) -> Path:
        if not _VERSION_RE.match(version):
            raise InputError(f"a model version looks like v3-20261201T120000Z; got {version!r}", path="version")
        return self._agent_dir(tenant, agent) / version


__all__ = ["POOLED", "RETRAINS", "SHIPPED_VERSION", "ZERO_SHOT", "ModelVersion", "Registry", "Servable", "WHERE_FILE", "agent_key"]

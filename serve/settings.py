"""All settings of the service, in one pydantic-settings class (environment prefix ``TRIAGE_``).

No other module reads ``os.environ``: code receives a :class:`Settings` (the app through the
cached :func:`get_settings` dependency, which tests override).
"""

from __future__ import annotations

import re
from datetime import timedelta
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from model.core.paths import PARAMS

_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class Settings(BaseSettings):
    """Settings of the service and the CLI. Every field reads ``TRIAGE_<NAME>`` from the environment."""

    model_config = SettingsConfigDict(env_prefix="TRIAGE_", extra="ignore")

    host: str = Field(default="127.0.0.1", description="Address `triage serve` binds.")
    port: int = Field(default=8000, ge=1, le=65535)
    workers: int = Field(default=1, ge=1)
    cpu_affinity: Literal["auto", "off"] = Field(
        default="auto",
        description="`auto`: `triage serve` pins each worker process to a CPU of its own when this machine's "
        "CPUs are the server's (no cgroup CPU quota below them, no more workers than CPUs, one onnxruntime "
        "thread): a request's threads then share one CPU's caches (docs/deployment.md). `off`: the kernel "
        "places the workers.",
    )
    worker_cpus: str = Field(
        default="", pattern=r"^(\d+(,\d+)*)?$",
        description="Set by `triage serve` for its workers under `cpu_affinity=auto`: the CPUs they claim, one "
        "each (serve/supervise.py). Empty: none is pinned.",
    )
    max_body_bytes: int = Field(default=5 * 1024 * 1024, ge=1024, description="Larger bodies get 413.")
    max_steps: int = Field(default=5000, ge=1, description="Longer traces get 413.")
    model_path: Path | None = Field(
        default=None,
        description="Folder of the classifier artefact (classifier.onnx + tokenizer.json + gate.json); "
        "default: the shipped model/artifacts/ when present.",
    )
    classifier: bool = Field(default=True, description="Load the classifier at start-up when present.")
    runscore: bool = Field(
        default=True,
        description="Load the run scorer (failure_probability, attribution; runscore.json in the model "
        "folder) at start-up when present.",
    )
    runscore_relative_min_runs: int = Field(
        default=50, ge=2,
        description="Once a tenant's task type has this many diagnosed runs, `healthy` compares "
        "failure_probability with the 90th percentile of its recent runs instead of the fixed operating point.",
    )
    ort_threads: int = Field(default=1, ge=1, description=(
        "onnxruntime intra-op threads per worker (1: a second thread costs more CPU than it saves wall time at a "
        "request's batch sizes; docs/benchmarks.md)."))
    policy_path: Path | None = Field(default=None, description="A repair policy YAML over the default.")

    # -- store, auth, redaction, retention (the service issue) --------------------------------
    data_dir: Path = Field(
        default=Path(".triage"), description="Working folder of the SQLite store and the local key."
    )
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the store (postgresql://… to scale out); "
        "default sqlite:///<data_dir>/triage.db (WAL).",
    )
    db_busy_timeout_s: float = Field(default=10.0, gt=0, description="SQLite writers wait this long.")
    auth: Literal["on", "off"] = Field(
        default="on", description="`off` is for local experiments only: every call is tenant `local`."
    )
    auth_cache_s: float = Field(
        default=5.0, ge=0, description="How long a worker trusts a key lookup (revocation delay)."
    )
    key_file: Path | None = Field(
        default=None, description="The local API key `make run` creates; default <data_dir>/local.key."
    )
    operator_tenants: str = Field(
        default="",
        description="Tenants whose keys are operators: /metrics shows them every tenant (comma-separated).",
    )
    metrics_public: bool = Field(
        default=False,
        description="/metrics answers without a key and shows every tenant (a scraper on a trusted network).",
    )
    redact: str = Field(
        default="api_key,bearer,url_password,email,card,ssn",
        description="Redaction rules applied before diagnosing and storing (comma-separated; empty = none).",
    )
    redact_mode: Literal["mask", "hash"] = Field(
        default="mask", description="`hash` stores an HMAC of each secret instead of a mask."
    )
    redact_salt: str = Field(default="", description="HMAC key of redact_mode=hash.")
    retention_days: float | None = Field(
        default=None, gt=0, description="Delete runs created longer ago than this (with everything derived from "
        "them), for every tenant without a retention of its own (`triage store retention`); at start-up, then hourly."
    )
    patterns_max_stale_s: float = Field(
        default=30.0, ge=0,
        description="Seconds a failure-patterns answer (`GET /v1/patterns`, the console) may lag the tenant's data: "
        "within them an answer made for the window is given again, and made anew in the background, while runs are "
        "written (0: every answer counts every run committed before it).",
    )
    stream_detector: str = Field(default="cusum", description="Stream detector for observations.")
    alarm_cache_s: float = Field(
        default=1.0, ge=0,
        description="Seconds a worker reuses the open stream alarms it read for a diagnosis (one query per "
        "(tenant, agent) per period instead of one per request; its own feeds refresh them at once).",
    )
    stream_feed_s: float = Field(
        default=1.0, ge=0, le=60,
        description="Seconds a worker gathers diagnosed runs' values before it feeds them into their agents' streams, "
        "in one transaction (each run writes one row of the feed; readers of the streams apply what waits first). "
        "0: each diagnosis feeds its own in its transaction.",
    )
    stream_autofeed: str = Field(
        default="latency_ms,tokens_out,output_chars,failure_probability",
        description="Per-trace metrics every /v1/diagnose feeds into the tenant's streams "
        "(comma-separated names of model.streams.metrics; empty = none).",
    )
    eval_export_endpoint: str | None = Field(
        default=None,
        description="OTLP/HTTP logs endpoint (…/v1/logs): each diagnosis goes there as gen_ai.evaluation.result "
        "events parented to the failing spans; unset: no export.",
    )
    eval_export_headers: str = Field(
        default="", description="Headers for that endpoint, OTel form: Authorization=Bearer%20…,k=v."
    )
    eval_export_timeout_s: float = Field(default=5.0, gt=0, description="Timeout of one export request.")
    session_detectors_exclude: str = Field(
        default="incomplete",
        description="Detectors not run on a session while it is still running (comma-separated).",
    )

    # -- fair share: rate limits and quotas (serve/ratelimit.py; 0 turns a limit off) -----------
    rate_limit_key_rps: float = Field(
        default=20.0, ge=0, description="Requests a second per API key (per client address with auth off)."
    )
    rate_limit_key_burst: float = Field(default=40.0, ge=0, description="Burst of the per-key limit.")
    rate_limit_tenant_rps: float = Field(
        default=50.0, ge=0, description="Requests a second per tenant, all its keys together."
    )
    rate_limit_tenant_burst: float = Field(default=100.0, ge=0, description="Burst of the per-tenant limit.")
    rate_limit_table: str = Field(
        default="",
        description="Set by `triage serve --workers N` for its workers: the shared-memory file of the "
        "request-rate buckets they all spend (serve/ratetable.py; on PostgreSQL the buckets are rows there, "
        "shared by every replica, and the file remembers the refusals). Empty: each process keeps its own.",
    )
    quota_daily_steps: int = Field(
        default=1_000_000, ge=0, description="Steps a tenant may import per UTC day (shared through the store)."
    )
    heavy_body_bytes: int = Field(
        default=512 * 1024,
        ge=0,
        description="/v1/diagnose bodies this large or larger are served by a helper process of the "
        "worker, so they cannot stall its small requests (0: never).",
    )
    cpu_slots: int = Field(
        default=1,
        ge=1,
        description="Diagnoses and session appends a worker works on at once; the next slot goes to "
        "the tenants waiting in turn (more slots: more overlap of store waits, less isolation).",
    )
    flood_lane_s: float = Field(
        default=2.0,
        ge=0,
        description="For this long after a tenant was answered 429, its admitted diagnoses are served by a "
        "helper process of the worker at a lower CPU priority, not beside the other tenants' (0: never; "
        "serve/fairshare.py).",
    )
    tenant_inflight: int = Field(
        default=16,
        ge=0,
        description="Requests of one tenant in progress at once on one worker; more get 429 with Retry-After: 1 "
        "before their body is read (0: no cap; serve/fairshare.py).",
    )
    session_window_steps: int = Field(
        default=64,
        ge=16,
        description="A session append re-reads only its last this-many steps (rules and classifier, "
        "model/diagnosis/incremental.py); the findings on earlier steps are kept from earlier appends.",
    )

    # -- readiness and drain behind a load balancer (serve/supervise.py, serve/routers/health.py) ----------
    drain_s: float = Field(
        default=0.0, ge=0, le=300,
        description="On SIGTERM a worker first answers /readyz 503 (draining) for this long while it still "
        "serves, so that a load balancer stops sending it requests; then it stops accepting connections, "
        "finishes the requests in flight and exits. Behind a balancer set it to the balancer's health-check "
        "interval times its failure threshold (docs/deployment.md).",
    )
    drain_timeout_s: float = Field(
        default=30.0, gt=0,
        description="After the drain period, requests still in flight after this long are cancelled and the "
        "worker exits.",
    )

    # -- canary share (serve/services/canary.py) ----------------------------------------------------------
    repair_canary_percent: float = Field(
        default=100.0,
        ge=0.0,
        le=100.0,
        description="Share of sessions (by a hash of tenant and session id) in the repair arm; the others "
        "are shadow: diagnosed and recorded, recommended `continue`. /metrics compares the arms. Default "
        "100: repair for all, as before the canary (a lower value withholds repairs from agents that use them).",
    )
    canary_window: timedelta = Field(
        default=timedelta(days=7),
        description="/metrics' canary figures count the runs started within this window (to the top of the hour "
        "it began in): `7d`, `12h`, `90m`, seconds, or ISO 8601 (`P7D`); at least 1h. Default 7d.",
    )

    @field_validator("canary_window", mode="before")
    @classmethod
    def _window(cls, v: object) -> object:
        if isinstance(v, str):
            m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", v.lower())
            if m:
                return timedelta(seconds=float(m[1]) * _UNIT_S[m[2]])
        return v

    @field_validator("canary_window")
    @classmethod
    def _window_at_least_an_hour(cls, v: timedelta) -> timedelta:
        if v < timedelta(hours=1):
            raise ValueError(f"the canary window is at least 1h (its counts are kept per hour); got {v}")
        return v

    # -- agent models: retraining and the registry (issue 20; model/scoring/agent_registry.py, serve/services/retrain.py) ----
    model_registry: Path | None = Field(
        default=None,
        description="Root of the agent-model registry (<root>/<tenant>/agents/<agent>/<version>/); default "
        "<data_dir>/models. Several servers or workers must see one shared path (each loads the artefacts).",
    )
    retrain_min_runs: int = Field(
        default=20, ge=4,
        description="`triage retrain`: an agent gets a model of its own from this many labelled runs (with "
        "TRIAGE_RETRAIN_MIN_CLASS of each class); the other agents' runs train the tenant's pooled model.",
    )
    retrain_min_class: int = Field(
        default=5, ge=2,
        description="`triage retrain`: the failed and the successful runs a model needs, at least, each.",
    )
    retrain_min_where_runs: int = Field(
        default=20, ge=3,
        description="`triage retrain`: the labelled failing runs that say where they went wrong (a label's `step` or "
        "`source_index`) an agent needs before its own where-model is fitted and compared with the position prior.",
    )
    retrain_cv_folds: int = Field(
        default=5, ge=2, le=20, description="`triage retrain`: grouped cross-validation folds of the gate.",
    )
    retrain_cv_draws: int = Field(
        default=1, ge=1, le=20,
        description="`triage retrain`: shufflings of the tasks into folds (the gate's estimate averages them).",
    )
    params_path: Path = Field(
        default=PARAMS,
        description="The parameters file `triage retrain` reads (its learning_curve section: the agent model's "
        "configuration); default: the checkout's params.yaml (beside model/), wherever the command runs. "
        "A missing file is an error, not defaults.",
    )
    zero_shot_recentre_ttl_s: float = Field(
        default=60.0, gt=0,
        description="Zero-shot answers of an agent with labelled runs are re-centred on its observed failure "
        "rate; each worker re-reads the agent's labels this often (seconds).",
    )

    # -- per-tenant models in the running service: the hot swap (serve/services/agent_models.py) ---------------
    model_poll_s: float = Field(
        default=10.0,
        gt=0,
        le=50,
        description="Each worker re-reads the active model version of the tenants it serves this often "
        "(seconds) and swaps a newly promoted or rolled-back one in without a restart.",
    )

    # -- the console (/ui; serve/routers/ui.py) ---------------------------------------------------
    ui_session_hours: float = Field(
        default=12.0, gt=0, le=24 * 30,
        description="A console sign-in lasts this long (hours); signing out or revoking the key ends it sooner.",
    )

    @property
    def resolved_database_url(self) -> str:
        """``database_url``, or the SQLite file in ``data_dir``."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'triage.db').resolve()}"

    @property
    def resolved_key_file(self) -> Path:
        return self.key_file or self.data_dir / "local.key"

    @property
    def resolved_model_registry(self) -> Path:
        """``model_registry``, or ``<data_dir>/models``."""
        return self.model_registry or self.data_dir / "models"


@lru_cache
def get_settings() -> Settings:
    """The process's settings (cached); tests override the dependency instead of the environment."""
    return Settings()


__all__ = ["Settings", "get_settings"]

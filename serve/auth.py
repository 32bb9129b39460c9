"""Tenants and API keys: keys are shown once and stored only as a hash; every ``/v1`` call is scoped.

A key looks like ``trg_<id>_<secret>``: ``<id>`` (8 characters) is public and names the key in
``triage keys list`` / ``revoke``; the store keeps ``sha256(key)`` only. Keys are 190 bits of
randomness, so an unsalted hash is enough (no dictionary to attack) and lets a lookup be one
indexed query.

**Operator keys** (``triage keys create --operator``) may act on any tenant: a request that names one
in the ``X-Triage-Tenant`` header is scoped to it (a name that is not a tenant's: 404; a key that is
not an operator's: 403, whatever the name), and only operators may promote or roll back models over
the API (``/v1/operator/…``). Without the header an operator key acts on its own tenant.

``TRIAGE_AUTH=off`` turns the check off for local experiments: every call is tenant ``local``, and
the server warns loudly at start.

>>> key, key_id, key_hash = generate_key()
>>> key.startswith(f"trg_{key_id}_") and hash_key(key) == key_hash
True
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import string
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, Header, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from serve.store.keys import KeyStore

log = logging.getLogger("triage.auth")

KEY_PREFIX = "trg"
LOCAL_TENANT = "local"
#: The header an operator names the tenant to act on with.
TENANT_HEADER = "X-Triage-Tenant"
_ALPHABET = string.ascii_letters + string.digits


@dataclass(frozen=True)
class Principal:
    """Who is calling: the tenant every read and write is scoped to, and the key used (if any)."""

    tenant: str
    key_id: str | None = None
    #: an operator key (may switch tenants, promote and roll back models)
    operator: bool = False
    #: the key's own tenant when an operator switched to another one (``tenant``); else None
    home_tenant: str | None = None


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def generate_key() -> tuple[str, str, str]:
    """A new key: ``(key, key_id, sha256 hex)``. The key itself is never stored."""
    key_id = "".join(secrets.choice(_ALPHABET) for _ in range(8))
    key = f"{KEY_PREFIX}_{key_id}_{secrets.token_urlsafe(24)}"
    return key, key_id, hash_key(key)


def create_key(store: KeyStore, tenant: str, label: str = "", *, operator: bool = False) -> tuple[str, str]:
    """Create a key for ``tenant`` (created when new); returns ``(key, key_id)`` — show it once.
    ``operator``: the key may switch tenants and promote / roll back models."""
    key, key_id, key_hash = generate_key()
    store.add_api_key(tenant, key_id, key_hash, label, operator=operator)
    return key, key_id


def ensure_local_key(store: KeyStore, path: Path, tenant: str = LOCAL_TENANT) -> tuple[str, bool]:
    """The key kept in ``path`` (git-ignored), created with a new key on first use.

    Returns ``(key, created)``. A file whose key is no longer valid (revoked, or a new database)
    is replaced.
    """
    if path.exists():
        key = path.read_text(encoding="utf-8").strip()
        if key and store.find_api_key(hash_key(key)) is not None:
            return key, False
    key, _ = create_key(store, tenant, label="local (make run)")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(key + "\n", encoding="utf-8")
    path.chmod(0o600)
    return key, True


class KeyCache:
    """A per-worker cache of key hash → tenant, so a request costs no query within ``ttl_s``.

    Revocation therefore takes effect within ``ttl_s`` seconds on every worker.
    """

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._entries: dict[str, tuple[float, Principal | None]] = {}

    def cached(self, key: str) -> Principal | None:
        """The principal of ``key`` when this worker looked it up within ``ttl_s`` (no query)."""
        hit = self._entries.get(hash_key(key))
        if hit is not None and time.monotonic() - hit[0] < self.ttl_s:
            return hit[1]
        return None

    def lookup(self, store: KeyStore, key: str) -> Principal | None:
        digest = hash_key(key)
        now = time.monotonic()
        hit = self._entries.get(digest)
        if hit is not None and now - hit[0] < self.ttl_s:
            return hit[1]
        row = store.find_api_key(digest)
        principal = None if row is None else Principal(tenant=row.tenant_id, key_id=row.id, operator=bool(row.operator))
        if self.ttl_s > 0:
            if len(self._entries) > 10_000:
                self._entries.clear()
            self._entries[digest] = (now, principal)
        return principal


bearer_scheme = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="`Authorization: Bearer trg_…` — create one with `triage keys create --tenant NAME`.",
)

_UNAUTHORIZED: dict[int | str, dict[str, Any]] = {
    403: {"description": f"`{TENANT_HEADER}` (or an operator action) from a key that is not an operator's"},
    404: {"description": f"Not found for this tenant, or `{TENANT_HEADER}` names no tenant"},
    401: {
        "description": "Missing, unknown or revoked API key",
        "content": {
            "application/json": {
                "example": {
                    "detail": [{"loc": ["header", "authorization"], "msg": "…", "type": "unauthorized"}]
                }
            }
        },
    }
}


def cached_principal(scope: Any) -> Principal | None:
    """The principal of an HTTP request (ASGI ``scope``) as this worker cached its key: no query, only
    the headers read (the middleware in front of routing use it: serve/ratelimit.py, serve/fairshare.py).
    ``LOCAL_TENANT``'s with ``TRIAGE_AUTH=off``; None when the key is not cached or not a well-formed
    bearer key (the route's dependency then authenticates it)."""
    state = getattr(scope.get("app"), "state", None)
    if not getattr(state, "auth_enabled", True):
        return Principal(tenant=LOCAL_TENANT)
    cache: KeyCache | None = getattr(state, "key_cache", None)
    if cache is None:
        return None
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, key = value.decode("latin-1").partition(" ")
            key = key.strip()
            if scheme.lower() == "bearer" and key.startswith(f"{KEY_PREFIX}_") and len(key) <= 200:
                return cache.cached(key)
            return None
    return None


def _unauthorized(msg: str) -> HTTPException:
    return HTTPException(
        status_code=401,
        detail=[{"loc": ["header", "authorization"], "msg": msg, "type": "unauthorized"}],
        headers={"WWW-Authenticate": "Bearer"},
    )


def forbidden(msg: str, loc: list[str]) -> HTTPException:
    return HTTPException(status_code=403, detail=[{"loc": loc, "msg": msg, "type": "forbidden"}])


def switch_tenant(store: KeyStore, principal: Principal, tenant: str | None) -> Principal:
    """``principal`` acting on ``tenant`` (the ``X-Triage-Tenant`` header): operators only (403
    otherwise, whatever the name), an existing tenant only (404); ``None`` or its own: unchanged."""
    if tenant is None:
        return principal
    loc = ["header", TENANT_HEADER.lower()]
    if not principal.operator:
        raise forbidden(f"only operator keys may name a tenant in {TENANT_HEADER}", loc)
    if tenant == principal.tenant:
        return principal
    if not store.tenant_exists(tenant):
        raise HTTPException(status_code=404, detail=[{"loc": loc, "msg": f"no tenant {tenant[:64]!r}",
                                                      "type": "not_found"}])
    return Principal(tenant=tenant, key_id=principal.key_id, operator=True,
                     home_tenant=principal.home_tenant or principal.tenant)


async def get_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
    x_triage_tenant: Annotated[
        str | None,
        Header(alias=TENANT_HEADER, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$",
               description="Operator keys only: act on this tenant instead of the key's own."),
    ] = None,
) -> Principal:
    """The caller's tenant from ``Authorization: Bearer <key>``; 401 when missing or unknown; an
    operator's ``X-Triage-Tenant`` switches it (:func:`switch_tenant`)."""
    if not getattr(request.app.state, "auth_enabled", True):
        if x_triage_tenant is not None and x_triage_tenant != LOCAL_TENANT:
            raise forbidden(f"TRIAGE_AUTH=off: every call is tenant {LOCAL_TENANT!r}; {TENANT_HEADER} "
                            "cannot switch it", ["header", TENANT_HEADER.lower()])
        return Principal(tenant=LOCAL_TENANT)
    if credentials is None or not credentials.credentials:
        raise _unauthorized("missing `Authorization: Bearer <API key>` header")
    key = credentials.credentials.strip()
    if not key.startswith(f"{KEY_PREFIX}_") or len(key) > 200:
        raise _unauthorized("not an agent-triage API key (they start with `trg_`)")
    cache: KeyCache = request.app.state.key_cache
    store: KeyStore = request.app.state.key_store
    principal = cache.lookup(store, key)
    if principal is None:
        raise _unauthorized("unknown or revoked API key")
    return switch_tenant(store, principal, x_triage_tenant)


def require_operator(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    """The principal, when its key is an operator's; 403 otherwise."""
    if not principal.operator:
        raise forbidden("this call needs an operator key (`triage keys create --operator`)",
                        ["header", "authorization"])
    return principal


OperatorDep = Annotated[Principal, Depends(require_operator)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
CredentialsDep = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)]
UNAUTHORIZED_RESPONSES = _UNAUTHORIZED


def warn_auth_off() -> None:
    """The loud start-up warning for ``TRIAGE_AUTH=off``."""
    bar = "!" * 78
    log.warning(
        "\n%s\n!! TRIAGE_AUTH=off: authentication is DISABLED. Every caller is tenant %r and can read\n"
        "!! every trace stored under it. Use this for local experiments only, never on a shared host.\n%s",
        bar,
        LOCAL_TENANT,
        bar,
    )


# -- console sessions (the /ui pages) ------------------------------------------------------------
#
# Signing in with an API key opens a server-side session: the browser gets a random token in an
# HttpOnly, SameSite=Strict cookie (Secure when the request came over TLS) scoped to /ui; the store
# keeps the token's sha256, the key's id and a CSRF token. Signing out, expiry and revoking the key
# end it (the lookup joins the key and checks it is not revoked). The raw key never leaves the form.

SESSION_COOKIE = "triage_session"
SESSION_PATH = "/ui"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
_AUTH_OFF_KEY_ID = "-"  # the session of TRIAGE_AUTH=off: tenant local, no key to revoke


@dataclass(frozen=True)
class UISession:
    """A signed-in console session: its principal and its CSRF token."""

    principal: Principal
    csrf: str
    token_hash: str


def open_ui_session(store: KeyStore, key: str | None, *, ttl: timedelta, auth_enabled: bool = True) -> str | None:
    """Sign in: a new session for the tenant of ``key``; returns the cookie's token (``None`` for a
    missing, malformed, unknown or revoked key). With auth off every sign-in is tenant ``local``."""
    if auth_enabled:
        key = (key or "").strip()
        if not key.startswith(f"{KEY_PREFIX}_") or len(key) > 200:
            return None
        row = store.find_api_key(hash_key(key))
        if row is None:
            return None
        tenant, key_id = row.tenant_id, row.id
    else:
        tenant, key_id = LOCAL_TENANT, _AUTH_OFF_KEY_ID
    token = secrets.token_urlsafe(32)
    store.add_ui_session(hash_key(token), tenant=tenant, key_id=key_id, csrf=secrets.token_urlsafe(24),
                         expires_at=datetime.now(UTC) + ttl)
    return token


def find_ui_session(store: KeyStore, token: str | None, *, auth_enabled: bool = True) -> UISession | None:
    """The live session of the cookie's ``token`` (not signed out, not expired, key not revoked)."""
    if not token or len(token) > 100:
        return None
    got = store.find_ui_session(hash_key(token), require_key=auth_enabled)
    if got is None:
        return None
    row, operator = got
    key_id = None if row.key_id == _AUTH_OFF_KEY_ID else row.key_id
    principal = Principal(tenant=row.tenant_id, key_id=key_id, operator=operator)
    if row.acting_tenant and operator and row.acting_tenant != row.tenant_id:
        # an operator acting on another tenant: the same rules as X-Triage-Tenant on the API
        principal = Principal(tenant=row.acting_tenant, key_id=key_id, operator=True, home_tenant=row.tenant_id)
    return UISession(principal, row.csrf, row.id)


def csrf_ok(session: UISession, given: str | None) -> bool:
    """Whether a form's or a request header's CSRF token is this session's (constant time)."""
    return bool(given) and secrets.compare_digest(session.csrf.encode(), str(given).encode())


__all__ = [
    "CSRF_FIELD",
    "CSRF_HEADER",
    "SESSION_COOKIE",
    "SESSION_PATH",
    "UISession",
    "csrf_ok",
    "find_ui_session",
    "open_ui_session",
    "KEY_PREFIX",
    "LOCAL_TENANT",
    "KeyCache",
    "OperatorDep",
    "cached_principal",
    "Principal",
    "TENANT_HEADER",
    "CredentialsDep",
    "PrincipalDep",
    "UNAUTHORIZED_RESPONSES",
    "create_key",
    "ensure_local_key",
    "generate_key",
    "get_principal",
    "hash_key",
    "require_operator",
    "switch_tenant",
    "warn_auth_off",
]

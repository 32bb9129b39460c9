"""Tenants, API keys and the console's signed-in sessions (serve/auth.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import false, select, update

from serve.store.base import StoreBase, check_tenant_name, rowcount
from serve.store.tables import ApiKey, Tenant, UISessionRow, utcnow


class KeyStore(StoreBase):
    """The ``tenants``, ``api_keys`` and ``ui_sessions`` tables."""

    # -- tenants and keys ----------------------------------------------------------------------
    def ensure_tenant(self, name: str) -> Tenant:
        check_tenant_name(name)
        with self.write() as db:
            row = db.get(Tenant, name)
            if row is None:
                row = Tenant(id=name, name=name)
                db.add(row)
            return row

    def tenant_exists(self, name: str) -> bool:
        with self.read() as db:
            return db.get(Tenant, name) is not None

    def add_api_key(self, tenant: str, key_id: str, key_hash: str, label: str = "", *,
                    operator: bool = False) -> ApiKey:
        check_tenant_name(tenant)
        with self.write() as db:
            if db.get(Tenant, tenant) is None:
                db.add(Tenant(id=tenant, name=tenant))
                db.flush()
            row = ApiKey(id=key_id, tenant_id=tenant, key_hash=key_hash, label=label, operator=operator)
            db.add(row)
            return row

    def find_api_key(self, key_hash: str) -> ApiKey | None:
        """The active (not revoked) key with this hash."""
        with self.read() as db:
            return db.scalar(select(ApiKey).where(ApiKey.key_hash == key_hash, ApiKey.revoked_at.is_(None)))

    def list_api_keys(self, tenant: str | None = None) -> list[ApiKey]:
        with self.read() as db:
            q = select(ApiKey).order_by(ApiKey.created_at, ApiKey.id)
            if tenant is not None:
                q = q.where(ApiKey.tenant_id == tenant)
            return list(db.scalars(q))

    def revoke_api_key(self, key_id: str) -> bool:
        """Revoke by key id (its public prefix); False when there is no such active key."""
        with self.write() as db:
            row = db.get(ApiKey, key_id)
            if row is None or row.revoked_at is not None:
                return False
            row.revoked_at = utcnow()
            return True

    # -- console sessions (serve/auth.py) -------------------------------------------------------
    def add_ui_session(
        self, token_hash: str, *, tenant: str, key_id: str, csrf: str, expires_at: datetime
    ) -> None:
        """Record a console sign-in: the sha256 of the cookie's token, never the token."""
        with self.write() as db:
            db.add(UISessionRow(id=token_hash, tenant_id=tenant, key_id=key_id, csrf=csrf, expires_at=expires_at))

    def find_ui_session(
        self, token_hash: str, *, require_key: bool = True, now: datetime | None = None
    ) -> tuple[UISessionRow, bool] | None:
        """The live session with this token hash and whether its key is an operator's: not signed
        out, not expired, and (``require_key``) its API key not revoked — revoking the key ends
        every session opened with it."""
        now = now or utcnow()
        if require_key:
            q: Any = select(UISessionRow, ApiKey.operator).join(ApiKey, ApiKey.id == UISessionRow.key_id).where(
                ApiKey.revoked_at.is_(None), ApiKey.tenant_id == UISessionRow.tenant_id)
        else:
            q = select(UISessionRow, false())
        q = q.where(UISessionRow.id == token_hash, UISessionRow.revoked_at.is_(None), UISessionRow.expires_at > now)
        with self.read() as db:
            got = db.execute(q).first()
        return None if got is None else (got[0], bool(got[1]))

    def set_ui_session_tenant(self, token_hash: str, tenant: str | None) -> None:
        """An operator's session acts on ``tenant`` from now on (``None``: its key's own)."""
        with self.write() as db:
            db.execute(update(UISessionRow).where(UISessionRow.id == token_hash).values(acting_tenant=tenant))

    def revoke_ui_session(self, token_hash: str) -> bool:
        """Sign out: the session ends now; False when there was no live one."""
        with self.write() as db:
            got = db.execute(
                update(UISessionRow)
                .where(UISessionRow.id == token_hash, UISessionRow.revoked_at.is_(None))
                .values(revoked_at=utcnow())
            )
            return rowcount(got) > 0


__all__ = ["KeyStore"]

"""The failure-history store: SQLAlchemy models, Alembic migrations, and the repository."""

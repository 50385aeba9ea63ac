"""The PostgreSQL fixture (tests/support/postgres.py): a real server, a database per test."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e  # starts a server of its own


def test_upsert_leaves_one_row(pg_url: str, postgres) -> None:
    sqlalchemy = pytest.importorskip("sqlalchemy")
    from sqlalchemy import text

    assert pg_url.startswith(f"postgresql+psycopg://postgres@127.0.0.1:{postgres.port}/test_")
    engine = sqlalchemy.create_engine(pg_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE items (key TEXT PRIMARY KEY, price NUMERIC(10, 2) NOT NULL)"))
            upsert = text(
                "INSERT INTO items (key, price) VALUES (:key, :price) "
                "ON CONFLICT (key) DO UPDATE SET price = EXCLUDED.price"
            )
            conn.execute(upsert, {"key": "/item/1/", "price": 9.99})
            conn.execute(upsert, {"key": "/item/1/", "price": 12.5})
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT key, price FROM items")).all()
    finally:
        engine.dispose()
    assert [(key, float(price)) for key, price in rows] == [("/item/1/", 12.5)]

"""pgfence with FastAPI: enqueue inside the request's transaction, run an AsyncWorker in the app's lifespan.

``POST /orders {"item": "book"}`` inserts an order and enqueues its ``ship_order`` job in
one transaction: both are committed together, or neither is (``"dry_run": true`` rolls
the transaction back: the ids it returns exist nowhere). ``GET /jobs/{id}`` shows a job.
The app's lifespan starts a :class:`pgfence.aio.AsyncWorker` as a task of the server's
event loop and stops it gracefully (unstarted jobs given back, running ones finished
within ``shutdown_grace``) when the server shuts down; the server owns the signals
(``run(handle_signals=False)``).

Run it (uvicorn, from a checkout with the schema deployed)::

    PGFENCE_DSN=postgresql://app@localhost/app uvicorn --app-dir examples fastapi_app:app
    curl -s -XPOST localhost:8000/orders -H 'content-type: application/json' -d '{"item": "book"}'

Settings (environment): ``PGFENCE_DSN`` (else libpq's PG* variables),
``PGFENCE_EXAMPLE_QUEUE`` [``orders``]. The app creates its table
``pgfence_example_orders`` if it is missing.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Optional

import psycopg
from fastapi import Depends, FastAPI, HTTPException, Request
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel

from pgfence import Job, JobNotFound
from pgfence.aio import AsyncClient, AsyncWorker

SCHEMA = """CREATE TABLE IF NOT EXISTS pgfence_example_orders (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    item text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    shipped_at timestamptz)"""


class OrderIn(BaseModel):
    item: str
    dry_run: bool = False


class OrderOut(BaseModel):
    order: int
    job: int
    committed: bool


class JobOut(BaseModel):
    id: int
    kind: str
    status: str
    attempts: int
    result: Any = None
    last_error: Optional[str] = None


def handlers(db: AsyncConnectionPool) -> dict[str, Any]:
    """The worker's handlers: ``async def``, awaited on the server's loop (a plain function
    would run on one of the worker's threads)."""

    async def ship_order(job: Job) -> Any:
        async with db.connection() as conn:
            await conn.execute("UPDATE pgfence_example_orders SET shipped_at = now() WHERE id = %s",
                               (job.payload["order"],))
        return {"shipped": job.payload["order"]}

    return {"ship_order": ship_order}


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Open the request pool and the worker's client, run the worker; on shutdown stop the
    worker (gracefully) and close both."""
    dsn = os.environ.get("PGFENCE_DSN", "")
    queue = os.environ.get("PGFENCE_EXAMPLE_QUEUE", "orders")
    # Request transactions: not autocommit (each request commits or rolls back its own).
    db = AsyncConnectionPool(dsn, min_size=1, max_size=10, open=False, name="example-requests")
    await db.open(wait=True, timeout=30)
    async with db.connection() as conn:
        await conn.execute(SCHEMA)
    client = await AsyncClient.connect(dsn, max_size=4)  # the worker's own autocommit pool
    worker = AsyncWorker(client, handlers(db), queues=[queue], concurrency=8, shutdown_grace=10)
    task = asyncio.ensure_future(worker.run(handle_signals=False))
    app.state.db, app.state.queue, app.state.client = db, queue, client
    app.state.worker, app.state.worker_task = worker, task
    try:
        yield
    finally:
        worker.stop()
        try:
            await task
        finally:
            await client.close()
            await db.close()


app = FastAPI(title="pgfence example", lifespan=lifespan)


async def connection(request: Request) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A connection of the request pool for one request."""
    async with request.app.state.db.connection() as conn:
        yield conn


@app.post("/orders")
async def create_order(order: OrderIn, request: Request,
                       conn: psycopg.AsyncConnection[Any] = Depends(connection)) -> OrderOut:
    """Insert the order and enqueue its shipping in one transaction."""
    async with conn.transaction():
        cur = await conn.execute("INSERT INTO pgfence_example_orders (item) VALUES (%s) RETURNING id",
                                 (order.item,))
        row = await cur.fetchone()
        assert row is not None
        order_id = int(row[0])
        # An AsyncClient on the request's connection: the enqueue joins its transaction.
        job_id = await AsyncClient(conn, check_schema=False).enqueue(
            "ship_order", {"order": order_id}, queue=request.app.state.queue,
            idempotency_key=f"ship-order-{order_id}")
        if order.dry_run:
            raise psycopg.Rollback()  # neither the order nor its job is kept
    return OrderOut(order=order_id, job=job_id, committed=not order.dry_run)


@app.get("/jobs/{job_id}")
async def get_job(job_id: int, request: Request) -> JobOut:
    """A job's status and result (``pgfence.job``)."""
    try:
        job = await request.app.state.client.get_job(job_id)
    except JobNotFound:
        raise HTTPException(status_code=404, detail=f"job {job_id} not found") from None
    return JobOut(id=job.id, kind=job.kind, status=job.status, attempts=job.attempts, result=job.result,
                  last_error=job.last_error)


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "8000")))

"""Remake the dashboard screenshots of the README (docs/img/dashboard-*.png).

    .venv/bin/python examples/dashboard_demo.py --fill-only --dsn DSN
    .venv/bin/python scripts/dashboard_screenshots.py DSN_AS_THE_DASHBOARD_ROLE

Serves the app on a loopback port, logs in with headless Chromium (/usr/bin/chromium)
and saves the overview, the manual-review inbox, a job's timeline and the dead letter.
"""
from __future__ import annotations

import secrets
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import uvicorn
from playwright.sync_api import sync_playwright
from psycopg_pool import ConnectionPool

from pgfence.dashboard.app import Config, create_app

OUT = Path(__file__).resolve().parents[1] / "docs" / "img"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


def main(dsn: str, job_id: str = "") -> int:
    token = secrets.token_urlsafe(24)
    pool = ConnectionPool(dsn, min_size=1, max_size=4, kwargs={"autocommit": True}, open=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(pool, Config(token=token)), host="127.0.0.1", port=port,
                                           log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}"
    OUT.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(tempfile.mkdtemp(), executable_path="/usr/bin/chromium",
                                                    headless=True, args=ARGS, viewport={"width": 1280, "height": 800})
        page = ctx.new_page()
        page.goto(base + "/login")
        page.fill("input[name=name]", "alice")
        page.fill("input[name=token]", token)
        page.click("form.login button")
        page.wait_for_url(base + "/")
        for name, path in (("overview", "/"), ("inbox", "/inbox"), ("dead-letter", "/dead"),
                           ("queues", "/queues"), *((("timeline", f"/jobs/{job_id}"),) if job_id else ())):
            page.goto(base + path)
            page.screenshot(path=str(OUT / f"dashboard-{name}.png"), full_page=name != "inbox")
        ctx.close()
    server.should_exit = True
    pool.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))

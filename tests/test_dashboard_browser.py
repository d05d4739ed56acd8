"""The dashboard in a real browser: headless Chromium (Debian's /usr/bin/chromium, which
scripts/setup.sh installs) driven by Playwright, against the app served by uvicorn on a
loopback port, over the test database as a throwaway operator login.

A screenshot of every page is saved under .artifacts/dashboard/ (or $PGFENCE_ARTIFACTS).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

pytest.importorskip("starlette")
sync_api = pytest.importorskip("playwright.sync_api")

from pgfence import Client  # noqa: E402
from pgfence.dashboard.app import Config, create_app  # noqa: E402
from pgfence.errors import LeaseLost  # noqa: E402
from support.dashboard import (TOKEN, claim, enqueue, expire_and_reclaim, failed_job, manual_review_job,  # noqa: E402
                               pool_as, served)
from support.db import REPO, Conn, delete_queues, one, unique_name  # noqa: E402
from support.roles import login_roles  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(os.environ.get("PGFENCE_ARTIFACTS", str(REPO / ".artifacts"))) / "dashboard"
OP = "t_dash_browser"

pytestmark = pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK),
                                reason="needs /usr/bin/chromium (scripts/setup.sh installs it as root)")


@pytest.fixture(scope="module")
def op_pool(dsn: str) -> Iterator[Any]:
    with login_roles(dsn, {OP: "pgfence_operator"}), pool_as(dsn, OP) as pool:
        yield pool


@pytest.fixture(scope="module")
def browser_context() -> Iterator[Any]:
    profile = tempfile.mkdtemp(prefix="pgfence-chromium-")
    with sync_api.sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, headless=True, args=ARGS,
                                                    viewport={"width": 1360, "height": 900})
        try:
            yield ctx
        finally:
            ctx.close()
            shutil.rmtree(profile, ignore_errors=True)


def _page(ctx: Any, base: str) -> Any:
    # (cookies are per host, not per port: each served app gets a host name of its own)
    page = ctx.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.accept()))
    page.dialogs = dialogs
    # what the browser refused under the Content-Security-Policy (must stay empty: every
    # script and style of the pages is a file of the app's own)
    page.csp_errors = []
    page.on("console", lambda m: page.csp_errors.append(m.text)
            if m.type == "error" and "Content Security Policy" in m.text else None)
    page.goto(base + "/")
    assert page.url.endswith("/login")
    page.fill("input[name=name]", "alice")
    page.fill("input[name=token]", TOKEN)
    page.click("form.login button")
    page.wait_for_url(base + "/")
    return page


@pytest.fixture(scope="module")
def operator(op_pool: Any, browser_context: Any) -> Iterator[tuple[Any, str]]:
    app = create_app(op_pool, Config(token=TOKEN))
    with served(app) as base:
        page = _page(browser_context, base)
        yield page, base
        page.close()


@pytest.fixture
def q(conn: Conn) -> Iterator[str]:
    name = unique_name("dashb")
    yield name
    one(conn, "SELECT pgfence.resume_queue(queue => %s)", (name,))
    delete_queues(conn, [name])


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_a_manual_job_appears_in_the_inbox_with_why(operator: tuple[Any, str], conn: Conn, q: str) -> None:
    page, base = operator
    job_id = manual_review_job(conn, q, payload='{"order": 1234, "amount_cents": 990}')
    page.goto(f"{base}/inbox?queue={q}")
    card = page.locator(f"#job-{job_id}")
    assert card.is_visible()
    why = card.locator(".why").inner_text()
    assert "worker-manual" in why and "Lease expired" in why and "claimed" in why
    assert '"amount_cents": 990' in card.locator("pre.payload").inner_text()
    assert card.get_by_role("button", name="Run again").is_visible()
    assert card.get_by_role("button", name="Cancel").is_visible()
    shot(page, "inbox")


def test_mark_done_with_a_note_changes_the_job_and_writes_the_audit(operator: tuple[Any, str], conn: Conn,
                                                                    q: str, op_pool: Any) -> None:
    page, base = operator
    job_id = manual_review_job(conn, q)
    page.goto(f"{base}/inbox?queue={q}")
    card = page.locator(f"#job-{job_id}")
    card.locator("summary").click()
    card.locator("textarea[name=note]").fill("charged once: checked in the PSP dashboard")
    card.locator("textarea[name=result]").fill('{"charge": "ch_1"}')
    card.get_by_role("button", name="Mark done").click()
    page.wait_for_url(f"{base}/inbox")
    assert one(conn, "SELECT status FROM pgfence.all_jobs WHERE id = %s", (job_id,)) == "done"
    row = conn.execute("SELECT action, note, actor, db_role, job_ids FROM pgfence.operator_audit"
                       " WHERE job_ids @> ARRAY[%s::bigint] ORDER BY id DESC LIMIT 1", (job_id,)).fetchone()
    assert row is not None
    assert row[0] == "mark_done" and row[1] == "charged once: checked in the PSP dashboard"
    assert row[2] == "alice" and row[3] == OP and list(row[4]) == [job_id]
    page.goto(f"{base}/jobs/{job_id}")
    assert "charged once" in page.locator("#audit").inner_text()


def test_bulk_requeue_of_dead_letters(operator: tuple[Any, str], conn: Conn, q: str) -> None:
    page, base = operator
    error = f"smtp 550 mailbox full {q}"
    ids = [failed_job(conn, q, error) for _ in range(4)]
    page.goto(f"{base}/dead")
    shot(page, "dead_letter")
    row = page.locator("#dead tr", has_text=error)
    row.get_by_role("button", name="Requeue all…").click()
    assert "This will touch 4 jobs" in page.locator("#preview-count").inner_text()
    assert one(conn, "SELECT count(*) FROM pgfence.jobs WHERE id = ANY(%s) AND status = 'failed'", (ids,)) == 4
    page.click("#confirm")
    assert "4 of 4" in page.locator("h1").inner_text()
    assert one(conn, "SELECT count(*) FROM pgfence.jobs WHERE id = ANY(%s) AND status = 'queued'", (ids,)) == 4
    acted = one(conn, "SELECT job_ids FROM pgfence.operator_audit WHERE action LIKE 'requeue%%'"
                      " AND job_ids && %s::bigint[] ORDER BY id DESC LIMIT 1", (ids,))
    assert sorted(acted) == sorted(ids)


def test_bulk_delete_of_dead_letters_asks_for_a_note_and_keeps_the_audit(operator: tuple[Any, str], conn: Conn,
                                                                         q: str) -> None:
    page, base = operator
    error = f"invalid address {q}"
    ids = [failed_job(conn, q, error) for _ in range(3)]
    page.goto(f"{base}/dead")
    page.locator("#dead tr", has_text=error).get_by_role("button", name="Delete all…").click()
    assert "This will touch 3 jobs" in page.locator("#preview-count").inner_text()
    shot(page, "dead_letter_delete_preview")
    page.click("#confirm")  # (the note is required: the browser refuses the empty form)
    assert one(conn, "SELECT count(*) FROM pgfence.jobs WHERE id = ANY(%s)", (ids,)) == 3
    page.fill("textarea[name=note]", "bounced addresses, customer notified")
    page.click("#confirm")
    assert "3 of 3" in page.locator("h1").inner_text()
    assert one(conn, "SELECT count(*) FROM pgfence.jobs WHERE id = ANY(%s)", (ids,)) == 0
    row = conn.execute("SELECT action, note, job_ids FROM pgfence.operator_audit WHERE job_ids && %s::bigint[]"
                       " ORDER BY id DESC LIMIT 1", (ids,)).fetchone()
    assert row is not None and row[0] == "purge" and row[1] == "bounced addresses, customer notified"
    assert sorted(row[2]) == sorted(ids)


def test_the_timeline_shows_the_overlap_of_a_reclaimed_attempt(operator: tuple[Any, str], conn: Conn, q: str,
                                                               dsn: str) -> None:
    page, base = operator
    job_id = enqueue(conn, q, "resize", '{"image": 7}')
    (jid, stale_token), = claim(conn, q, "worker-a", lease=timedelta(milliseconds=50))
    assert jid == job_id
    expire_and_reclaim(conn, [job_id])
    (jid, token_b), = claim(conn, q, "worker-b")
    assert jid == job_id
    # worker-a, unaware, reports its result: refused (PF001) and recorded by the client
    with Client.connect(dsn, max_size=1) as stale:
        with pytest.raises(LeaseLost):
            stale.complete(job_id, stale_token, {"done": True})
    one(conn, "SELECT pgfence.complete(job_id => %s, attempt_token => %s)", (job_id, token_b))
    page.goto(f"{base}/jobs/{job_id}")
    assert page.locator("#overlap-note").is_visible()
    assert page.locator("#timeline rect.overlap").count() >= 2
    assert page.locator("#timeline circle.rejected").count() == 1
    assert str(stale_token) in page.locator("#rejections").inner_text()
    shot(page, "job_timeline")


def test_pausing_a_queue_stops_claims(operator: tuple[Any, str], conn: Conn, q: str) -> None:
    page, base = operator
    first = enqueue(conn, q)
    page.goto(f"{base}/queues")
    row = page.locator("#queue-list tr", has_text=q)
    row.get_by_role("button", name="Pause").click()
    page.wait_for_url(f"{base}/queues")
    assert "paused" in page.locator("#queue-list tr", has_text=q).inner_text()
    assert claim(conn, q, "worker-p") == []
    shot(page, "queues")
    page.locator("#queue-list tr", has_text=q).get_by_role("button", name="Resume").click()
    page.wait_for_url(f"{base}/queues")
    assert [c[0] for c in claim(conn, q, "worker-p")] == [first]


def test_a_script_payload_renders_as_text(operator: tuple[Any, str], conn: Conn, q: str) -> None:
    page, base = operator
    evil = '<script>alert("payload")</script><img src=x onerror=alert("img")>'
    job_id = manual_review_job(conn, q, payload='{"html": %s}' % __import__("json").dumps(evil),
                               kind='<script>alert("kind")</script>')
    before = len(page.dialogs)
    for path in (f"/inbox?queue={q}", f"/jobs/{job_id}", f"/jobs?queue={q}"):
        page.goto(base + path)
        page.wait_for_timeout(200)
    assert len(page.dialogs) == before, page.dialogs
    page.goto(f"{base}/jobs/{job_id}")
    assert evil.replace('"', '\\"') in page.locator("#payload").inner_text()
    assert page.locator("img[src=x]").count() == 0


def test_every_page_screenshot_and_live_overview(operator: tuple[Any, str], conn: Conn, q: str) -> None:
    page, base = operator
    for _ in range(3):
        enqueue(conn, q)
    page.goto(f"{base}/")
    assert q in page.locator("#queues").inner_text()
    shot(page, "overview")
    n = enqueue(conn, q)  # noqa: F841
    # the overview refreshes itself: the queued count of our queue goes 3 -> 4 without a reload
    row = page.locator("#queues tr", has_text=q)
    page.wait_for_function("(q) => [...document.querySelectorAll('#queues tr')].some("
                           "r => r.textContent.includes(q) && r.children[1].textContent.trim() === '4')", arg=q,
                           timeout=15000)
    assert row.count() == 1
    page.goto(f"{base}/jobs?queue={q}")
    shot(page, "jobs")
    page.goto(f"{base}/audit")
    shot(page, "audit")
    assert page.csp_errors == []
    # the control: markup with an inline handler that escaping had missed would not run
    page.evaluate("""() => { const d = document.createElement('div');
        d.innerHTML = '<img src="/static/nope.png" onerror="window.pwned = 1">';
        document.body.appendChild(d); }""")
    page.wait_for_timeout(300)
    assert page.evaluate("() => window.pwned") is None
    assert page.csp_errors, "the CSP did not report the inline handler"


def test_read_only_mode_hides_and_refuses_actions(op_pool: Any, browser_context: Any, conn: Conn, q: str) -> None:
    job_id = manual_review_job(conn, q)
    app = create_app(op_pool, Config(token=TOKEN, read_only=True))
    with served(app) as base:
        base = base.replace("127.0.0.1", "localhost")
        page = _page(browser_context, base)
        page.goto(f"{base}/inbox?queue={q}")
        assert page.locator(f"#job-{job_id}").is_visible()
        assert page.get_by_role("button", name="Run again").count() == 0
        assert page.get_by_role("button", name="Cancel").count() == 0
        assert "read-only" in page.locator("header .who").inner_text()
        page.goto(f"{base}/queues")
        assert page.get_by_role("button", name="Pause").count() == 0
        shot(page, "read_only_inbox")
        # a forged POST from the page's own origin, with the page's CSRF token, is refused
        status = page.evaluate("""async ([id]) => {
            const csrf = document.querySelector('input[name=csrf]').value;
            const r = await fetch('/jobs/' + id + '/action', {method: 'POST',
                body: new URLSearchParams({csrf, action: 'cancel'})});
            return r.status; }""", [job_id])
        assert status == 403
        page.close()
    assert one(conn, "SELECT status FROM pgfence.jobs WHERE id = %s", (job_id,)) == "manual_review"


def test_a_post_without_the_csrf_token_is_refused_in_the_browser(operator: tuple[Any, str], conn: Conn,
                                                                 q: str) -> None:
    page, base = operator
    job_id = manual_review_job(conn, q)
    page.goto(f"{base}/inbox")
    status = page.evaluate("""async ([id]) => {
        const r = await fetch('/jobs/' + id + '/action', {method: 'POST',
            body: new URLSearchParams({action: 'cancel'})});
        return r.status; }""", [job_id])
    assert status == 403
    assert one(conn, "SELECT status FROM pgfence.jobs WHERE id = %s", (job_id,)) == "manual_review"


def test_an_unauthenticated_browser_is_refused_on_a_non_loopback_bind(op_pool: Any, browser_context: Any,
                                                                      conn: Conn, q: str) -> None:
    # (configured as bound to every interface; served on loopback here)
    job_id = manual_review_job(conn, q)
    app = create_app(op_pool, Config(token=TOKEN, bind_host="0.0.0.0"))
    with served(app) as base:
        base = base.replace("127.0.0.1", "localhost")
        browser_context.clear_cookies(domain="localhost")  # (the operator page keeps its 127.0.0.1 session)
        page = browser_context.new_page()
        for path in ("/", "/inbox", f"/jobs/{job_id}", "/dead", "/queues"):
            page.goto(base + path)
            assert page.url == base + "/login", path
            assert "charge" not in page.content()
        status = page.evaluate("""async ([id]) => (await fetch('/jobs/' + id + '/action', {method: 'POST',
            body: new URLSearchParams({action: 'cancel', csrf: 'x'})})).status""", [job_id])
        assert status == 401
        assert page.evaluate("async () => (await fetch('/metrics')).status") == 401
        shot(page, "login")
        page.close()
    assert one(conn, "SELECT status FROM pgfence.jobs WHERE id = %s", (job_id,)) == "manual_review"


def test_a_dead_letter_group_whose_error_has_line_breaks_is_requeued(operator: tuple[Any, str], conn: Conn,
                                                                     q: str) -> None:
    # a browser sends every line break of a form's value as CRLF (the HTML standard): the group's
    # error went back as "...\r\nretry..." and matched no job ("Nothing to do")
    page, base = operator
    ids = [failed_job(conn, q, f"smtp down {q}\nretry in 5 min\r\nlast line\rend") for _ in range(2)]
    page.goto(f"{base}/dead")
    page.locator("#dead tr", has_text=f"smtp down {q}").get_by_role("button", name="Requeue all…").click()
    assert "This will touch 2 jobs" in page.locator("#preview-count").inner_text()
    page.click("#confirm")
    assert "2 of 2" in page.locator("h1").inner_text()
    assert one(conn, "SELECT count(*) FROM pgfence.jobs WHERE id = ANY(%s) AND status = 'queued'", (ids,)) == 2
    # and from the jobs page, whose filter came in the URL (the dead letter's count links there)
    for job_id in ids:   # (out of the way of the next claim)
        one(conn, "SELECT pgfence.cancel(job_id => %s)", (job_id,))
    more = failed_job(conn, q, f"smtp down {q}\nretry in 5 min\r\nlast line\rend")
    page.goto(f"{base}/jobs?status=failed&queue={q}&error=" + quote(f"{q}\nretry in 5 min\r\nlast"))
    page.get_by_role("button", name="Preview: run again").click()
    assert "This will touch 1 job" in page.locator("#preview-count").inner_text()
    page.click("#confirm")
    assert one(conn, "SELECT status FROM pgfence.jobs WHERE id = %s", (more,)) == "queued"

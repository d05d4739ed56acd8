"""The web dashboard over HTTP (Starlette's TestClient, no browser): authentication,
Host/Origin checks, CSRF, escaping, the CSP, the read-only mode, /metrics, the start
checks. The browser flows are in test_dashboard_browser.py."""
from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from pgfence.dashboard.app import Config, create_app  # noqa: E402
from pgfence.dashboard.server import Options, StartError, check_role, read_token  # noqa: E402
from support.dashboard import TOKEN, enqueue, failed_job, manual_review_job, pool_as  # noqa: E402
from support.db import Conn, delete_queues, one, scratch_database, unique_name  # noqa: E402
from support.roles import login_roles  # noqa: E402

OP = "t_dash_op"
ORIGIN = {"origin": "http://127.0.0.1"}


@pytest.fixture(scope="module")
def op_pool(dsn: str) -> Iterator[Any]:
    with login_roles(dsn, {OP: "pgfence_operator"}), pool_as(dsn, OP) as pool:
        yield pool


@pytest.fixture
def q(conn: Conn) -> Iterator[str]:
    name = unique_name("dash")
    yield name
    delete_queues(conn, [name])


def client_for(pool: Any, *, login: bool = True, **cfg: Any) -> TestClient:
    app = create_app(pool, Config(token=TOKEN, **cfg))
    c = TestClient(app, base_url="http://127.0.0.1")
    if login:
        r = c.post("/login", data={"token": TOKEN, "name": "alice"}, headers=ORIGIN, follow_redirects=False)
        assert r.status_code == 303, r.text
    return c


def csrf_of(html: str) -> str:
    m = re.search(r'name="csrf" value="([^"]+)"', html)
    assert m, "no CSRF field on the page"
    return m.group(1)


def test_every_page_renders_for_an_operator(op_pool: Any, conn: Conn, q: str) -> None:
    job_id = manual_review_job(conn, q)
    c = client_for(op_pool)
    for path in ("/", "/overview/live", "/inbox", "/jobs", f"/jobs/{job_id}", "/dead", "/queues", "/audit",
                 f"/jobs?queue={q}", f"/jobs?error=x&status=failed"):
        r = c.get(path)
        assert r.status_code == 200, (path, r.text[:500])
    assert f"#{job_id}" in c.get("/inbox").text


def test_the_job_page_shows_a_live_jobs_run_timeout_and_unique_for(op_pool: Any, conn: Conn, q: str) -> None:
    job_id = conn.execute("SELECT pgfence.enqueue('k', '{}', %s, timeout => '90 seconds', unique_for => '2 hours',"
                          " idempotency_key => 'page')", (q,)).fetchone()[0]  # type: ignore[index]
    html = client_for(op_pool).get(f"/jobs/{job_id}").text
    assert "<tr><th>timeout</th><td>0:01:30</td></tr>" in html
    assert "<tr><th>unique_for</th><td>2:00:00</td></tr>" in html


def test_unauthenticated_requests_are_refused_on_a_non_loopback_bind(op_pool: Any) -> None:
    app = create_app(op_pool, Config(token=TOKEN, bind_host="0.0.0.0", allowed_hosts=["dash.example"]))
    c = TestClient(app, base_url="http://dash.example")
    r = c.get("/", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/login"
    for path in ("/inbox", "/jobs", "/dead", "/queues"):
        r = c.get(path, follow_redirects=False)
        assert r.status_code == 303, path
        assert "pgfence" not in r.text or "Log in" in r.text
    assert c.get("/metrics").status_code == 401
    assert c.post("/bulk", data={"action": "requeue", "ids": "1"},
                  headers={"origin": "http://dash.example"}).status_code == 401
    # a wrong token is refused, the right one gets in
    assert c.post("/login", data={"token": "wrong" * 4}, headers={"origin": "http://dash.example"}).status_code == 401
    assert c.post("/login", data={"token": TOKEN}, headers={"origin": "http://dash.example"},
                  follow_redirects=False).status_code == 303
    assert c.get("/").status_code == 200


def test_authentication_cannot_be_turned_off_off_loopback(op_pool: Any) -> None:
    with pytest.raises(ValueError):
        create_app(op_pool, Config(token=None, bind_host="0.0.0.0"))
    with pytest.raises(StartError):
        from pgfence.dashboard.server import run
        run(Options(dsn="", dsn_from_cli=False, bind="0.0.0.0:8484", no_auth=True))


def test_metrics_takes_the_token_as_a_bearer(op_pool: Any) -> None:
    c = client_for(op_pool, login=False)
    assert c.get("/metrics").status_code == 401
    assert c.get("/metrics", headers={"authorization": "Bearer nope-nope-nope-nope"}).status_code == 401
    assert c.get("/metrics", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_a_foreign_host_header_is_refused(op_pool: Any) -> None:
    c = client_for(op_pool)
    r = c.get("/", headers={"host": "evil.example"})
    assert r.status_code == 400
    r = c.get("/", headers={"host": "evil.example:8484"})
    assert r.status_code == 400


def test_a_post_without_the_csrf_token_is_refused(op_pool: Any, conn: Conn, q: str) -> None:
    job_id = manual_review_job(conn, q)
    c = client_for(op_pool)
    r = c.post(f"/jobs/{job_id}/action", data={"action": "cancel"}, headers=ORIGIN)
    assert r.status_code == 403 and "CSRF" in r.text
    r = c.post(f"/jobs/{job_id}/action", data={"action": "cancel", "csrf": "forged"}, headers=ORIGIN)
    assert r.status_code == 403
    assert one(conn, "SELECT status FROM pgfence.jobs WHERE id = %s", (job_id,)) == "manual_review"
    # with the token (and our own Origin) it goes through
    token = csrf_of(c.get("/inbox").text)
    r = c.post(f"/jobs/{job_id}/action", data={"action": "cancel", "csrf": token}, headers=ORIGIN,
               follow_redirects=False)
    assert r.status_code == 303
    assert one(conn, "SELECT status FROM pgfence.jobs WHERE id = %s", (job_id,)) == "cancelled"


def test_a_cross_origin_post_is_refused_even_with_the_token(op_pool: Any, conn: Conn, q: str) -> None:
    job_id = manual_review_job(conn, q)
    c = client_for(op_pool)
    token = csrf_of(c.get("/inbox").text)
    for headers in ({"origin": "http://evil.example"}, {}):
        r = c.post(f"/jobs/{job_id}/action", data={"action": "cancel", "csrf": token}, headers=headers)
        assert r.status_code == 403
    assert one(conn, "SELECT status FROM pgfence.jobs WHERE id = %s", (job_id,)) == "manual_review"


def test_every_response_carries_the_csp_and_framing_headers(op_pool: Any) -> None:
    c = client_for(op_pool)
    for path in ("/", "/login", "/static/app.js"):
        r = c.get(path)
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert r.headers["x-frame-options"] == "DENY"
        assert r.headers["x-content-type-options"] == "nosniff"


def test_hostile_strings_render_as_text(op_pool: Any, conn: Conn, q: str) -> None:
    evil = "<script>alert(1)</script>"
    job_id = manual_review_job(conn, q, payload='{"x": "<script>alert(1)</script>", "y": "\\"><img src=x>"}',
                               kind="k<b>old</b>")
    fid = failed_job(conn, q, error=f"boom {evil}")
    c = client_for(op_pool)
    for path in ("/inbox", f"/jobs/{job_id}", f"/jobs/{fid}", "/dead", f"/jobs?queue={q}"):
        html = c.get(path).text
        assert evil not in html and "<img src=x>" not in html and "<b>old</b>" not in html, path
        assert "&lt;script&gt;" in html, path
    assert "<script>" not in re.sub(r'<script src="/static/app.js" defer></script>', "", c.get("/inbox").text)


def test_read_only_mode_hides_and_refuses_actions(op_pool: Any, conn: Conn, q: str) -> None:
    job_id = manual_review_job(conn, q)
    fid = failed_job(conn, q, "boom")
    c = client_for(op_pool, read_only=True)
    for path in ("/inbox", f"/jobs/{job_id}", "/dead", "/queues"):
        html = c.get(path).text
        assert 'action="/jobs/' not in html and 'action="/bulk"' not in html and 'action="/queues/action"' not in html
    token = csrf_of(c.get("/").text)  # the log-out form still carries it
    for path, form in ((f"/jobs/{job_id}/action", {"action": "requeue"}),
                       ("/bulk", {"action": "requeue", "ids": str(fid), "confirm": "1"}),
                       ("/queues/action", {"action": "pause", "queue": q})):
        r = c.post(path, data={**form, "csrf": token}, headers=ORIGIN)
        assert r.status_code == 403 and "read-only" in r.text, path
    assert one(conn, "SELECT status FROM pgfence.jobs WHERE id = %s", (job_id,)) == "manual_review"
    assert one(conn, "SELECT status FROM pgfence.jobs WHERE id = %s", (fid,)) == "failed"
    assert one(conn, "SELECT count(*) FROM pgfence.queue_limits() WHERE queue = %s", (q,)) == 0


def test_bulk_filter_previews_before_it_acts(op_pool: Any, conn: Conn, q: str) -> None:
    ids = [failed_job(conn, q, "smtp down") for _ in range(3)]
    other = failed_job(conn, q, "bad address")
    c = client_for(op_pool)
    token = csrf_of(c.get("/dead").text)
    form = {"csrf": token, "mode": "filter", "status": "failed", "queue": q, "error": "smtp down",
            "action": "requeue"}
    r = c.post("/bulk", data=form, headers=ORIGIN)
    assert r.status_code == 200 and "This will touch 3 jobs" in r.text
    assert one(conn, "SELECT count(*) FROM pgfence.jobs WHERE id = ANY(%s) AND status = 'failed'", (ids,)) == 3
    r = c.post("/bulk", data={**form, "confirm": "1"}, headers=ORIGIN)
    assert r.status_code == 200 and "3 of 3" in r.text
    assert one(conn, "SELECT count(*) FROM pgfence.jobs WHERE id = ANY(%s) AND status = 'queued'", (ids,)) == 3
    assert one(conn, "SELECT status FROM pgfence.jobs WHERE id = %s", (other,)) == "failed"


def test_metrics_parse_and_match_the_database(op_pool: Any, conn: Conn, q: str) -> None:
    failed_job(conn, q, "x")
    enqueue(conn, q)
    enqueue(conn, q)
    c = client_for(op_pool)
    r = c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    assert families, r.text[:500]
    expected = {(row[0], row[1]): row[2] for row in conn.execute(
        "SELECT queue, status, jobs FROM pgfence.stats() WHERE queue = %s", (q,)).fetchall()}
    assert expected == {(q, "queued"): 2, (q, "failed"): 1}
    name = "pgfence_jobs"
    seen = {(s.labels["queue"], s.labels["status"]): s.value for s in families[name].samples
            if s.labels.get("queue") == q and s.value}
    assert seen == {k: float(v) for k, v in expected.items()}


def test_the_dashboard_refuses_a_superuser_unless_told(dsn: str) -> None:
    with pool_as(dsn, "postgres") as pool:
        with pytest.raises(StartError) as err:
            check_role(pool, allow_superuser=False)
        assert "superuser" in err.value.message
        assert check_role(pool, allow_superuser=True)["operator"]


def test_the_dashboard_refuses_a_role_without_pgfence_grants(dsn: str) -> None:
    with login_roles(dsn, {"t_dash_nobody": None}), pool_as(dsn, "t_dash_nobody") as pool:
        with pytest.raises(StartError):
            check_role(pool, allow_superuser=False)


def test_the_token_comes_from_the_environment_a_file_or_is_generated(tmp_path: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGFENCE_DASHBOARD_TOKEN", raising=False)
    token, generated = read_token(Options(dsn="", dsn_from_cli=False))
    assert generated and len(token or "") >= 24
    monkeypatch.setenv("PGFENCE_DASHBOARD_TOKEN", "from-the-environment")
    assert read_token(Options(dsn="", dsn_from_cli=False)) == ("from-the-environment", False)
    f = tmp_path / "token"
    f.write_text("from-a-file-0123456789\n")
    assert read_token(Options(dsn="", dsn_from_cli=False, token_file=str(f))) == ("from-a-file-0123456789", False)
    assert read_token(Options(dsn="", dsn_from_cli=False, no_auth=True)) == (None, False)


def test_a_viewer_login_gets_the_read_only_dashboard(dsn: str, conn: Conn, q: str) -> None:
    job_id = manual_review_job(conn, q)
    with login_roles(dsn, {"t_dash_viewer": "pgfence_viewer"}), pool_as(dsn, "t_dash_viewer") as pool:
        assert check_role(pool, allow_superuser=False) == {"role": "t_dash_viewer", "operator": False,
                                                            "viewer": True}
        c = client_for(pool)
        assert c.app.state.read_only  # type: ignore[attr-defined]
        html = c.get("/inbox").text
        assert f"#{job_id}" in html and 'action="/jobs/' not in html and "read-only" in html
        assert c.get(f"/jobs/{job_id}").status_code == 200
        assert c.get("/metrics").status_code == 200
        token = csrf_of(c.get("/").text)
        r = c.post(f"/jobs/{job_id}/action", data={"action": "cancel", "csrf": token}, headers=ORIGIN)
        assert r.status_code == 403
    assert one(conn, "SELECT status FROM pgfence.jobs WHERE id = %s", (job_id,)) == "manual_review"


def test_a_requeue_from_the_dashboard_is_audited_with_the_actor(op_pool: Any, conn: Conn, q: str) -> None:
    fid = failed_job(conn, q, "boom")
    c = client_for(op_pool)
    token = csrf_of(c.get(f"/jobs/{fid}").text)
    r = c.post(f"/jobs/{fid}/action", data={"action": "requeue", "note": "fixed the template", "csrf": token},
               headers=ORIGIN, follow_redirects=False)
    assert r.status_code == 303
    row = conn.execute("SELECT action, actor, db_role, note, job_ids FROM pgfence.operator_audit"
                       " WHERE job_ids @> ARRAY[%s::bigint] ORDER BY id DESC LIMIT 1", (fid,)).fetchone()
    assert row is not None and row[0] == "requeue" and row[1] == "alice" and row[2] == OP
    assert row[3] == "fixed the template" and list(row[4]) == [fid]
    assert "fixed the template" in c.get(f"/jobs/{fid}").text
    page = c.get("/audit").text
    first = page.split('<tbody>')[1].split('</tr>')[0]
    assert "requeue" in first and "alice" in first and f'href="/jobs/{fid}"' in first and "fixed the template" in first


def test_the_overview_counts_live_jobs_and_the_hour_s_finished_ones(op_pool: Any, conn: Conn, q: str) -> None:
    from support.dashboard import claim
    failed_job(conn, q, "boom")
    for _ in range(3):
        enqueue(conn, q)
    for job_id, token in claim(conn, q, "w", n=3):
        one(conn, "SELECT pgfence.complete(job_id => %s, attempt_token => %s)", (job_id, token))
    enqueue(conn, q)
    app = create_app(op_pool, Config(token=TOKEN))
    data = app.state.data
    for _ in range(2):  # the second read takes the minutes it kept from the first
        ov = data.overview()
        mine = [x for x in ov["queues"] if x["queue"] == q]
        assert len(mine) == 1
        assert mine[0]["states"] == {"queued": 1, "failed": 1}
        assert mine[0]["hour"] == {"done": 3, "failed": 1, "cancelled": 0}
        assert sum(v["done"] for _, v in ov["series"]) >= 3 and len(ov["series"]) == 60


def test_the_jobs_page_filters_and_pages_by_keyset(op_pool: Any, conn: Conn, q: str) -> None:
    from pgfence.dashboard.data import PAGE
    from support.dashboard import claim
    fid = failed_job(conn, q, "needle in the error")
    ids = [enqueue(conn, q, "k1" if i % 2 else "k2", key=f"{q}-key-{i}") for i in range(PAGE + 5)]
    (done_id, token), = claim(conn, q, "w")
    one(conn, "SELECT pgfence.complete(job_id => %s, attempt_token => %s)", (done_id, token))
    c = client_for(op_pool)
    first = c.get(f"/jobs?queue={q}").text
    shown = [int(x) for x in re.findall(r'<td class="num"><a href="/jobs/(\d+)">', first)]
    assert shown == sorted(ids + [fid], reverse=True)[:PAGE]
    nxt = re.search(r'href="(/jobs\?[^"]*before=\d+[^"]*)" id="next"', first)
    assert nxt is not None
    second = c.get(nxt.group(1).replace("&amp;", "&")).text
    rest = [int(x) for x in re.findall(r'<td class="num"><a href="/jobs/(\d+)">', second)]
    assert rest == sorted(ids + [fid], reverse=True)[PAGE:]
    # by idempotency key: a live job and a done one (its key in held_keys)
    for i, job_id in ((3, ids[3]), (ids.index(done_id), done_id)):
        page = c.get(f"/jobs?key={q}-key-{i}").text
        assert re.findall(r'<td class="num"><a href="/jobs/(\d+)">', page) == [str(job_id)]
    page = c.get(f"/jobs?queue={q}&kind=k1&status=queued").text
    assert len(re.findall(r'<td class="num"><a href="/jobs/(\d+)">', page)) == len([i for i in range(PAGE + 5) if i % 2]) - (1 if ids.index(done_id) % 2 else 0)
    page = c.get(f"/jobs?error=needle").text
    assert re.findall(r'<td class="num"><a href="/jobs/(\d+)">', page) == [str(fid)]
    assert re.findall(r'<td class="num"><a href="/jobs/(\d+)">', c.get(f"/jobs?id={fid}").text) == [str(fid)]


def test_the_cli_refuses_to_start_unsafely(dsn: str, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from pgfence.cli import main
    monkeypatch.setenv("PGFENCE_DASHBOARD_TOKEN", TOKEN)
    assert main(["dashboard", "--bind", "0.0.0.0:18999", "--no-auth"]) == 2
    assert "loopback" in capsys.readouterr().err
    assert main(["dashboard", "--bind", "nonsense"]) == 2
    capsys.readouterr()
    # the test database's DSN connects as its superuser: refused (and the bind never happens)
    assert main(["--dsn", dsn, "dashboard", "--bind", "127.0.0.1:18999"]) == 1
    err = capsys.readouterr().err
    assert "refusing to run as the superuser" in err and "--allow-superuser" in err
    # a password on the command line is warned about (and never printed)
    monkeypatch.setenv("PGFENCE_DASHBOARD_TOKEN", "short")
    assert main(["--dsn", dsn + "?password=s3cret-pw", "dashboard", "--bind", "127.0.0.1:18999"]) == 1
    err = capsys.readouterr().err
    assert "password in --dsn" in err and "s3cret-pw" not in err


def test_the_dashboard_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    from pgfence.cli import main
    assert main(["--help"]) == 0
    assert "dashboard" in capsys.readouterr().out
    assert main(["dashboard", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: pgfence dashboard") and "--bind" in out and "--token-file" in out
    assert "--token " not in out  # the secret is never an option's value


def test_the_error_search_reads_done_jobs_only_when_asked(op_pool: Any, conn: Conn, q: str) -> None:
    from support.dashboard import claim
    job_id = enqueue(conn, q, max_attempts=3)
    (jid, token), = claim(conn, q, "w")
    one(conn, "SELECT pgfence.fail(job_id => %s, attempt_token => %s, error => %s, retry_in => '0')",
        (job_id, token, f"flaky {q}"))
    (jid, token), = claim(conn, q, "w")
    one(conn, "SELECT pgfence.complete(job_id => %s, attempt_token => %s)", (job_id, token))
    assert one(conn, "SELECT last_error FROM pgfence.all_jobs WHERE id = %s", (job_id,)) == f"flaky {q}"
    c = client_for(op_pool)
    found = lambda url: re.findall(r'<td class="num"><a href="/jobs/(\d+)">', c.get(url).text)  # noqa: E731
    assert found(f"/jobs?error=flaky+{q}") == []
    assert found(f"/jobs?error=flaky+{q}&status=done") == [str(job_id)]


def _bulk_form(page: str) -> dict[str, str]:
    """The hidden fields of the first form that posts to /bulk in ``page`` ({} when none)."""
    import html
    at = page.find('<form method="post" action="/bulk"')
    if at < 0:
        return {}
    form = page[at:page.index("</form>", at)]
    return {k: html.unescape(v) for k, v in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form)}


def test_a_bulk_action_by_an_error_search_reaches_no_older_job_than_the_list_read(op_pool: Any, conn: Conn,
                                                                                   q: str) -> None:
    # The error text has no index, so the list reads a window of updated_at; the bulk form
    # carries that window's start: it used to carry none, and "run again" reached every
    # failed job of the queue with that error, however old, beyond those the list showed.
    from datetime import datetime, timedelta, timezone
    recent, old = failed_job(conn, q, "smtp down"), failed_job(conn, q, "smtp down")
    conn.execute("UPDATE pgfence.jobs SET updated_at = now() - interval '2 days' WHERE id = %s", (old,))
    c = client_for(op_pool)
    t0 = datetime.now(timezone.utc)
    page = c.get(f"/jobs?queue={q}&error=smtp+down").text
    t1 = datetime.now(timezone.utc)
    assert re.findall(r'<td class="num"><a href="/jobs/(\d+)">', page) == [str(recent)]
    form = _bulk_form(page)
    # the window's start: a day before the page was made, rounded up to the second
    start = datetime.fromisoformat(form["after"])
    assert t0 - timedelta(days=1) <= start <= t1 - timedelta(days=1) + timedelta(seconds=1), (form, t0, t1)
    r = c.post("/bulk", data={**form, "action": "requeue"}, headers=ORIGIN)
    assert r.status_code == 200 and "This will touch 1 job " in r.text, r.text
    assert form["after"] in r.text  # the preview shows the window's start
    carried = _bulk_form(r.text)
    assert carried["after"] == form["after"]
    r = c.post("/bulk", data=carried, headers=ORIGIN)
    assert r.status_code == 200 and "1 of 1" in r.text, r.text
    assert one(conn, "SELECT status FROM pgfence.jobs WHERE id = %s", (recent,)) == "queued"
    assert one(conn, "SELECT status FROM pgfence.jobs WHERE id = %s", (old,)) == "failed"

    # a window ending at a past "until" (its fraction of a second rounds the start up)
    until = "2026-06-01T12:00:00.5Z"
    one(conn, "SELECT pgfence.cancel(%s)", (recent,))  # (out of the way of failed_job's claim)
    inside, outside = failed_job(conn, q, "smtp down"), failed_job(conn, q, "smtp down")
    conn.execute("UPDATE pgfence.jobs SET updated_at = %s::timestamptz - interval '1 hour' WHERE id = %s",
                 (until, inside))
    conn.execute("UPDATE pgfence.jobs SET updated_at = %s::timestamptz - interval '1 day 1 minute' WHERE id = %s",
                 (until, outside))
    page = c.get(f"/jobs?queue={q}&error=smtp+down&until={until}").text
    assert re.findall(r'<td class="num"><a href="/jobs/(\d+)">', page) == [str(inside)]
    form = _bulk_form(page)
    assert (form["after"], form["until"]) == ("2026-05-31T12:00:01+00:00", until), form
    r = c.post("/bulk", data={**form, "action": "purge"}, headers=ORIGIN)
    assert r.status_code == 200 and "This will touch 1 job " in r.text, r.text

    # a narrower from..until is carried as given
    page = c.get(f"/jobs?queue={q}&error=smtp+down&after=2026-01-01T00:00Z&until=2026-01-01T12:00Z").text
    form = _bulk_form(page)
    assert (form["after"], form["until"]) == ("2026-01-01T00:00Z", "2026-01-01T12:00Z"), form
    assert "the error search's window" not in page
    # no action applies to done jobs: no bulk form (the database would refuse the status)
    assert _bulk_form(c.get(f"/jobs?queue={q}&error=smtp+down&status=done").text) == {}
    assert _bulk_form(c.get(f"/jobs?queue={q}&status=failed").text) != {}


def test_a_shared_reading_is_read_once_per_max_age_and_refreshed_in_the_background() -> None:
    import threading
    import time as _time

    from pgfence.dashboard.data import Reading
    calls: list[int] = []
    gate = threading.Event()

    def fn() -> int:
        if calls:
            gate.wait(5)
        calls.append(len(calls) + 1)
        return len(calls)
    r = Reading(fn, 0.05)
    assert r.get() == 1 and r.get() == 1 and calls == [1]   # the first read at once, then shared
    _time.sleep(0.06)
    assert r.get() == 1        # stale: the last one at once, a refresh starts in the background
    assert r.get() == 1        # (one refresh at a time)
    gate.set()
    deadline = _time.time() + 5
    while r.get() != 2 and _time.time() < deadline:
        _time.sleep(0.01)
    assert r.get() == 2 and calls == [1, 2]


def test_a_selection_is_previewed_then_acted_on_and_audited_with_its_ids(op_pool: Any, conn: Conn, q: str) -> None:
    a, b = manual_review_job(conn, q), manual_review_job(conn, q)
    other = manual_review_job(conn, q)
    c = client_for(op_pool)
    token = csrf_of(c.get(f"/inbox?queue={q}").text)
    form = {"csrf": token, "action": "cancel", "ids": [str(a), str(b)]}
    r = c.post("/bulk", data=form, headers=ORIGIN)
    assert r.status_code == 200 and "This will touch 2 jobs" in r.text
    assert one(conn, "SELECT count(*) FROM pgfence.jobs WHERE id = ANY(%s) AND status = 'manual_review'",
               ([a, b],)) == 2
    r = c.post("/bulk", data={**form, "confirm": "1"}, headers=ORIGIN)
    assert r.status_code == 200 and "2 of 2" in r.text
    assert one(conn, "SELECT count(*) FROM pgfence.jobs WHERE id = ANY(%s) AND status = 'cancelled'", ([a, b],)) == 2
    assert one(conn, "SELECT status FROM pgfence.jobs WHERE id = %s", (other,)) == "manual_review"
    row = conn.execute("SELECT action, actor, job_ids FROM pgfence.operator_audit"
                       " WHERE job_ids && %s::bigint[] ORDER BY id DESC LIMIT 1", ([a, b],)).fetchone()
    assert row is not None and row[1] == "alice" and sorted(row[2]) == sorted([a, b])
    # a second time: nothing left to act on, each row says why
    r = c.post("/bulk", data={**form, "confirm": "1"}, headers=ORIGIN)
    assert "0 of 2" in r.text


def test_an_action_redirects_only_within_the_site(op_pool: Any, conn: Conn, q: str) -> None:
    c = client_for(op_pool)
    for back, expected in (("//evil.example/x", None), ("/\\evil.example", None), ("https://evil.example", None),
                           ("/inbox", "/inbox")):
        job_id = manual_review_job(conn, q)
        token = csrf_of(c.get("/inbox").text)
        r = c.post(f"/jobs/{job_id}/action", data={"action": "cancel", "csrf": token, "back": back},
                   headers=ORIGIN, follow_redirects=False)
        assert r.status_code == 303
        assert r.headers["location"] == (expected or f"/jobs/{job_id}")


def test_without_authentication_on_loopback_the_csrf_token_is_still_required(op_pool: Any, conn: Conn,
                                                                             q: str) -> None:
    job_id = manual_review_job(conn, q)
    c = TestClient(create_app(op_pool, Config(token=None)), base_url="http://127.0.0.1")
    html = c.get("/inbox").text
    token = csrf_of(html)
    assert len(token) >= 32
    assert c.post(f"/jobs/{job_id}/action", data={"action": "cancel", "csrf": "open"},
                  headers=ORIGIN).status_code == 403
    assert c.post(f"/jobs/{job_id}/action", data={"action": "cancel", "csrf": token}, headers=ORIGIN,
                  follow_redirects=False).status_code == 303


def test_mark_done_in_bulk_needs_a_note_and_records_it(op_pool: Any, conn: Conn, q: str) -> None:
    a, b = manual_review_job(conn, q), manual_review_job(conn, q)
    c = client_for(op_pool)
    token = csrf_of(c.get(f"/inbox?queue={q}").text)
    form = {"csrf": token, "action": "mark_done", "ids": [str(a), str(b)]}
    assert c.post("/bulk", data=form, headers=ORIGIN).status_code == 400   # no note
    r = c.post("/bulk", data={**form, "note": "both shipped"}, headers=ORIGIN)
    assert r.status_code == 200 and "This will touch 2 jobs" in r.text and "both shipped" in r.text
    r = c.post("/bulk", data={**form, "note": "both shipped", "confirm": "1"}, headers=ORIGIN)
    assert "2 of 2" in r.text
    assert one(conn, "SELECT count(*) FROM pgfence.all_jobs WHERE id = ANY(%s) AND status = 'done'", ([a, b],)) == 2
    row = conn.execute("SELECT action, note, job_ids FROM pgfence.operator_audit WHERE job_ids && %s::bigint[]"
                       " ORDER BY id DESC LIMIT 1", ([a, b],)).fetchone()
    assert row is not None and row[1] == "both shipped" and sorted(row[2]) == sorted([a, b])


def test_the_dashboard_serves_https_with_a_secure_cookie(dsn: str, tmp_path: Any) -> None:
    import os
    import shutil
    import subprocess
    import sys
    import time as _time

    import httpx

    from support.dashboard import free_port
    if shutil.which("openssl") is None:
        pytest.skip("needs openssl to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"], check=True, capture_output=True)
    port = free_port()
    env = {**os.environ, "PGFENCE_DSN": dsn, "PGFENCE_DASHBOARD_TOKEN": TOKEN}
    proc = subprocess.Popen([sys.executable, "-m", "pgfence", "dashboard", "--bind", f"127.0.0.1:{port}",
                             "--allow-superuser", "--tls-cert", str(cert), "--tls-key", str(key)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        base = f"https://127.0.0.1:{port}"
        with httpx.Client(verify=False, base_url=base) as h:
            deadline = _time.time() + 30
            while True:
                try:
                    r = h.get("/", follow_redirects=False)
                    break
                except httpx.TransportError:
                    if _time.time() > deadline or proc.poll() is not None:
                        raise
                    _time.sleep(0.2)
            assert r.status_code == 303 and r.headers["location"] == "/login"
            r = h.post("/login", data={"token": TOKEN}, headers={"origin": base}, follow_redirects=False)
            assert r.status_code == 303
            cookie = r.headers["set-cookie"].lower()
            assert "secure" in cookie and "httponly" in cookie and "samesite=strict" in cookie
            assert h.get("/").status_code == 200
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=20)
    assert f"https://127.0.0.1:{port}/" in err and TOKEN not in err + out


def test_a_database_without_the_operator_functions_is_told_to_deploy(dsn: str) -> None:
    with scratch_database(dsn, "pgfence_dash_empty") as empty, pool_as(empty, "postgres") as pool:
        with pytest.raises(RuntimeError, match="sqitch deploy"):
            create_app(pool, Config(token=TOKEN))


def test_the_inbox_shows_the_start_of_a_large_payload(op_pool: Any, conn: Conn, q: str) -> None:
    from pgfence.dashboard.data import INBOX_PAYLOAD_CHARS
    big = '{"blob": "' + "x" * 50_000 + '"}'
    job_id = manual_review_job(conn, q, payload=big)
    c = client_for(op_pool)
    html = c.get(f"/inbox?queue={q}").text
    assert f"#{job_id}" in html and "x" * INBOX_PAYLOAD_CHARS not in html and "the whole job" in html
    assert len(html) < 20_000
    assert "x" * 50_000 in c.get(f"/jobs/{job_id}").text


def test_an_unexpected_error_is_a_plain_500_with_the_headers(op_pool: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    c = client_for(op_pool)

    def boom() -> None:
        raise ValueError("<script>secret</script>")
    monkeypatch.setattr(c.app.state.data, "dead_letter", boom)  # type: ignore[attr-defined]
    r = c.get("/dead")
    assert r.status_code == 500 and "secret" not in r.text
    assert "script-src 'self'" in r.headers["content-security-policy"]


def test_a_value_that_does_not_parse_is_refused_not_dropped_from_a_filter(op_pool: Any, conn: Conn, q: str) -> None:
    # An "until" that was not a time used to be left out of the filter: the preview listed
    # "until yesterday" and counted every failed job of the queue, and the confirm acted on all.
    old = failed_job(conn, q, "smtp down")
    c = client_for(op_pool)
    token = csrf_of(c.get("/dead").text)
    for field, value in (("until", "yesterday"), ("after", "2026-13-01"), ("until", "\x00")):
        form = {"csrf": token, "mode": "filter", "status": "failed", "queue": q, field: value, "action": "requeue"}
        for confirm in ({}, {"confirm": "1"}):
            r = c.post("/bulk", data={**form, **confirm}, headers=ORIGIN)
            assert r.status_code == 400 and field in r.text, (field, value, r.text[:300])
    for ids in (["abc"], [str(old), "1_0"], [str(old), "٣"], [str(old), "9" * 5000]):
        r = c.post("/bulk", data={"csrf": token, "action": "requeue", "ids": ids, "confirm": "1"}, headers=ORIGIN)
        assert r.status_code == 400 and "job id" in r.text, (ids, r.text[:300])
    assert one(conn, "SELECT status FROM pgfence.jobs WHERE id = %s", (old,)) == "failed"
    # the pages refuse what they cannot read instead of showing every job
    for path in ("/jobs?id=abc", f"/jobs?queue={q}&until=yesterday", f"/jobs?queue={q}&after=soon",
                 f"/jobs?queue={q}&status=bogus", f"/jobs?queue={q}&before=x", "/inbox?before=x", "/audit?before=1e3",
                 "/jobs/1_0"):
        r = c.get(path)
        assert r.status_code == 400, (path, r.status_code)
    assert c.get(f"/jobs?queue={q}&until=&after=&id=&before=&status=").status_code == 200


def test_a_deeply_nested_payload_is_not_blown_up_by_the_indentation(op_pool: Any, conn: Conn, q: str) -> None:
    # 40 kB of zeros 62 arrays deep: indented, every zero is a line of 126 spaces, a 2.6 MB
    # page (a 1 MiB payload, the most enqueue takes: 65 MB, and as much again for the result)
    depth, n = 62, 20_000
    payload = '{"a": ' + "[" * depth + ",".join(["0"] * n) + "]" * depth + "}"
    job_id = enqueue(conn, q, payload=payload)
    from pgfence.dashboard.data import pretty_json
    assert pretty_json('{"a": [1, {"b": 2}]}') == '{\n  "a": [\n    1,\n    {\n      "b": 2\n    }\n  ]\n}'
    html = client_for(op_pool).get(f"/jobs/{job_id}").text
    assert len(html) < 4 * len(payload) + 100_000, len(html)
    assert ": " + "[" * depth + "0, 0, 0" in html   # shown as stored, on one line


def test_a_post_body_is_bounded_before_it_is_read(op_pool: Any) -> None:
    # /login reads its form before any session exists: an unbounded body was read into memory whole
    from pgfence.dashboard.security import MAX_BODY
    c = client_for(op_pool, login=False)
    form = {"content-type": "application/x-www-form-urlencoded", **ORIGIN}
    # (Starlette refuses a field over 1 MiB, and a form of more than 1,000 fields, after reading them:
    # 999 fields of a MiB each were read, a GiB in memory per request)
    big = b"&".join(b"f%d=" % i + b"a" * 1_000_000 for i in range(MAX_BODY // 1_000_000 + 1))
    r = c.post("/login", content=big, headers=form)
    assert r.status_code == 413 and "too large" in r.text
    r = c.post("/login", content=iter([b"token=", b"a" * 100]), headers=form)   # chunked: no length declared
    assert r.status_code == 411
    for length in ("-1", "1e3", "0x10", "", "１２".encode(), "9" * 5000):
        r = c.post("/login", content=b"token=x", headers={**form, "content-length": length})
        assert r.status_code in (400, 411), length
    r = c.post("/login", content=b"token=" + TOKEN.encode(), headers=form, follow_redirects=False)
    assert r.status_code == 303   # a form of the size of ours goes through
    # the largest form the dashboard takes: a result of Starlette's 1 MiB a field, and a note and ids
    assert MAX_BODY >= (1 << 20) + 200_000


def test_bidi_and_control_characters_of_payloads_and_errors_are_shown_escaped(op_pool: Any, conn: Conn,
                                                                              q: str) -> None:
    # U+202E (right-to-left override) makes "\u202e0001" read as "1000" on the page an operator
    # decides a payment on; the job page's error and every payload showed it as it was
    job_id = manual_review_job(conn, q, payload='{"amount": "\u202e0001", "to": "\u2066x\u2069"}')
    fid = failed_job(conn, q, error="Traceback\n  line \u202eevil\x1b[2J\nValueError: \u200bboom")
    cut = manual_review_job(conn, q, payload='{"pad": "' + "p" * 5000 + '", "z": "\u202e9"}')
    c = client_for(op_pool)
    for path in (f"/jobs/{job_id}", f"/jobs/{fid}", "/inbox", f"/jobs/{cut}"):
        html = c.get(path).text
        for ch in ("\u202e", "\u2066", "\u2069", "\u200b", "\x1b"):
            assert ch not in html, (path, ch)
    assert "\\u202e0001" in c.get(f"/jobs/{job_id}").text
    assert "Traceback\n  line \\u202eevil\\u001b[2J\nValueError: \\u200bboom" in c.get(f"/jobs/{fid}").text


def test_a_result_nested_too_deep_to_parse_is_refused_with_a_clear_error(op_pool: Any, conn: Conn, q: str) -> None:
    # json.loads raises RecursionError, not ValueError, past ~1,000 levels: it was a 500
    job_id = manual_review_job(conn, q)
    c = client_for(op_pool)
    token = csrf_of(c.get("/inbox").text)
    deep = "[" * 100_000 + "]" * 100_000
    r = c.post(f"/jobs/{job_id}/action", data={"action": "mark_done", "note": "n", "result": deep, "csrf": token},
               headers=ORIGIN)
    assert r.status_code == 400 and "JSON" in r.text
    r = c.post("/bulk", data={"action": "mark_done", "note": "n", "result": deep, "ids": str(job_id), "csrf": token},
               headers=ORIGIN)
    assert r.status_code == 400 and "JSON" in r.text
    # and a value PostgreSQL refuses says why, without a "None:" where there is no SQLSTATE
    r = c.post(f"/jobs/{job_id}/action", data={"action": "mark_done", "note": "n\x00", "csrf": token}, headers=ORIGIN)
    assert r.status_code == 400 and "NUL" in r.text and "None" not in r.text
    assert one(conn, "SELECT status FROM pgfence.jobs WHERE id = %s", (job_id,)) == "manual_review"


def test_the_overview_and_the_queues_page_list_a_bounded_number_of_queues(op_pool: Any, conn: Conn, q: str) -> None:
    # a producer names queues at will: a row each for every queue made the overview, rendered
    # again every 5 s, grow without bound (100 MB for 100,000 queues)
    from pgfence.dashboard.data import QUEUE_NAMES_SHOWN, QUEUES_SHOWN
    names = [f"{q}-{i:04d}" for i in range(QUEUES_SHOWN + 5)]
    ids = [failed_job(conn, n, f"same error {q}") for n in names[:QUEUE_NAMES_SHOWN + 3]]
    conn.execute("SELECT pgfence.enqueue(kind => 'k', payload => '{}', queue => n) FROM unnest(%s::text[]) n",
                 (names[QUEUE_NAMES_SHOWN + 3:],))
    try:
        c = client_for(op_pool)
        for path in ("/", "/overview/live", "/queues"):
            html = c.get(path).text
            shown = len(set(re.findall(r"%s-\d{4}" % re.escape(q), html)))
            assert 0 < shown <= QUEUES_SHOWN and 'id="queues-more"' in html, (path, shown)
        dead = c.get("/dead").text
        row = next(r for r in dead.split("<tr>") if f"same error {q}" in r)
        assert len(re.findall(r"%s-\d{4}" % re.escape(q), row)) == QUEUE_NAMES_SHOWN
        assert f"({QUEUE_NAMES_SHOWN + 3} queues)" in row
        token = csrf_of(dead)
        r = c.post("/bulk", data={"csrf": token, "action": "requeue", "ids": [str(i) for i in ids], "confirm": "1"},
                   headers=ORIGIN)
        assert r.status_code == 200 and f"{len(ids)} of {len(ids)}" in r.text
        first = c.get("/audit").text.split("<tr>")[2]
        assert len(re.findall(r"%s-\d{4}" % re.escape(q), first)) == QUEUE_NAMES_SHOWN
        assert f"({QUEUE_NAMES_SHOWN + 3} queues)" in first
    finally:
        delete_queues(conn, names)


def test_no_bulk_form_widens_a_filter_it_cannot_carry(op_pool: Any, conn: Conn, q: str) -> None:
    # Review finding: the jobs page filtered by an idempotency key (or an id) offered "everything
    # matching this filter" without it (the bulk functions filter by neither): the action reached
    # the whole queue. And a deeply nested *_json value was a 500 (RecursionError), not a 400.
    key_job = enqueue(conn, q, key="k1")
    c = client_for(op_pool)
    for path in (f"/jobs?queue={q}&key=k1", f"/jobs?queue={q}&id={key_job}", f"/jobs?queue={q}&status=queued"):
        html = c.get(path).text
        assert ('Preview: run again' in html) == path.endswith("status=queued"), path
    token = csrf_of(c.get("/dead").text)
    deep = "[" * 100_000 + "]" * 100_000
    r = c.post("/bulk", data={"csrf": token, "mode": "filter", "status": "failed", "queue_json": deep,
                              "action": "requeue"}, headers=ORIGIN)
    assert r.status_code == 400 and "queue_json" in r.text

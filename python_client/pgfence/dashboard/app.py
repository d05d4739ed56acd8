"""The dashboard's ASGI app (Starlette): pages, actions, /metrics, and the guards around them.

Server-rendered with Jinja2 (autoescape on: every string from the database, payloads,
errors, queue names, worker ids, is HTML-escaped); the only JavaScript is
``static/app.js`` (the overview's live refresh, select-all, confirmations), served by
the app under ``script-src 'self'``. Every write is one pgfence SQL function call
(:mod:`.data`); the read-only mode (a ``pgfence_viewer`` login, or ``--read-only``)
hides the forms and refuses their POSTs with 403.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Awaitable, Callable, Optional
from urllib.parse import urlencode

import psycopg
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .._text import escaped_logger, printable, printable_lines
from . import data as d
from . import security as sec
from .timeline import build as build_timeline

log = escaped_logger("pgfence.dashboard")
HERE = Path(__file__).parent
STATES = ("queued", "processing", "manual_review", "failed", "cancelled", "done")
LIVE = STATES[:5]
ACTIONS = ("requeue", "cancel", "mark_done")
#: the bulk actions: those, and purge (delete failed or cancelled jobs now: pgfence.purge_many)
BULK_ACTIONS = (*ACTIONS, "purge")
#: the actions that need a note
NOTE_REQUIRED = ("mark_done", "purge")


@dataclass
class Config:
    """How the app runs. ``token=None`` turns authentication off (allowed on loopback only,
    checked by :func:`create_app`)."""

    token: Optional[str]
    bind_host: str = "127.0.0.1"
    read_only: bool = False
    allowed_hosts: list[str] = field(default_factory=list)
    secure_cookie: bool = False


def fmt_age(value: Optional[timedelta]) -> str:
    if value is None:
        return "-"
    s = value.total_seconds()
    neg = s < 0
    s = abs(s)
    if s < 1:
        out = f"{s * 1000:.0f} ms"
    elif s < 120:
        out = f"{s:.0f} s"
    elif s < 7200:
        out = f"{s / 60:.0f} min"
    elif s < 172800:
        out = f"{s / 3600:.1f} h"
    else:
        out = f"{s / 86400:.1f} d"
    return f"-{out}" if neg else out


def fmt_ts(value: Optional[datetime]) -> str:
    if value is None:
        return "-"
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _env() -> Environment:
    env = Environment(loader=FileSystemLoader(str(HERE / "templates")),
                      autoescape=select_autoescape(default=True, default_for_string=True))
    env.filters["age"] = fmt_age
    env.filters["ts"] = fmt_ts
    env.filters["printable"] = lambda v: "" if v is None else printable(v)
    env.filters["printable_lines"] = lambda v: "" if v is None else printable_lines(v)
    env.filters["pretty"] = d.pretty_json
    # a database string in a hidden input: as a JSON string (ASCII, no line break), read back by _text
    env.filters["carried"] = lambda v: json.dumps("" if v is None else str(v))
    env.globals["STATES"] = STATES
    env.globals["LIVE"] = LIVE
    return env


def create_app(pool: Any, config: Config) -> Starlette:
    """The ASGI app over a psycopg pool of the dashboard's role."""
    if config.token is None and not sec.is_loopback(config.bind_host):
        raise ValueError("authentication may be turned off only on a loopback bind")
    data = d.Data(pool)
    missing = data.detect()
    if missing:
        raise RuntimeError("this database lacks pgfence functions the dashboard calls ("
                           + ", ".join(missing) + "): deploy the matching pgfence schema (sqitch deploy)")
    ident = data.identity()
    read_only = config.read_only or not ident.operator
    env = _env()
    auth = sec.Auth(config.token)
    # (authentication off, loopback only: still a CSRF token, random per process)
    open_session = sec.Session(csrf=secrets.token_urlsafe(32), expires=float("inf"))
    allowed = {h.lower() for h in config.allowed_hosts} | {"localhost", "127.0.0.1", "::1"}
    if config.bind_host not in ("0.0.0.0", "::", ""):
        allowed.add(config.bind_host.lower())

    def render(request: Request, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        session = request.scope.get("pgfence.session")
        html = env.get_template(name).render(
            request=request, csrf=session.csrf if session else "", read_only=read_only, role=ident.role,
            actor=request.scope.get("pgfence.actor", ""), has=data.has, auth=auth.enabled,
            page=name.split(".")[0], cap=d.BULK_CAP, **ctx)
        return HTMLResponse(html, status_code=status)

    def error_page(request: Request, status: int, message: str) -> HTMLResponse:
        return render(request, "error.html", status=status, message=message)

    # -- the guard ----------------------------------------------------------
    class Guard(BaseHTTPMiddleware):
        async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
            try:
                response = await self._check(request, call_next)
            except Exception:  # (the message may hold database strings: logged escaped, not shown)
                log.exception("error serving %s %s", request.method, request.url.path)
                response = PlainTextResponse("pgfence dashboard: internal error (see its log)\n", status_code=500)
            for k, v in sec.SECURITY_HEADERS.items():
                response.headers.setdefault(k, v)
            return response

        async def _check(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
            host = sec.host_of(request.headers.get("host", ""))
            if host not in allowed:
                return PlainTextResponse("pgfence dashboard: Host header not allowed\n", status_code=400)
            if request.method not in ("GET", "HEAD"):
                # (its length before it is read: a form is read whole, /login's before any log-in)
                length = request.headers.get("content-length")
                if length is None or "transfer-encoding" in request.headers:
                    return PlainTextResponse("pgfence dashboard: a request body needs a Content-Length\n",
                                             status_code=411)
                if not re.fullmatch(r"[0-9]{1,18}", length):
                    return PlainTextResponse("pgfence dashboard: bad Content-Length\n", status_code=400)
                if int(length) > sec.MAX_BODY:
                    return PlainTextResponse(f"pgfence dashboard: request body too large (at most {sec.MAX_BODY}"
                                             " bytes)\n", status_code=413)
                origin = request.headers.get("origin") or request.headers.get("referer")
                if origin is None or sec.origin_host(origin) not in allowed:
                    return PlainTextResponse("pgfence dashboard: cross-origin request refused\n", status_code=403)
            path = request.url.path
            if path.startswith("/static/") or path == "/login":
                return await call_next(request)
            if not auth.enabled:
                request.scope["pgfence.session"] = open_session
                request.scope["pgfence.actor"] = "dashboard"
                return await call_next(request)
            sid = request.cookies.get(sec.SESSION_COOKIE)
            session = auth.session(sid)
            if session is None and path == "/metrics":
                bearer = request.headers.get("authorization", "")
                if bearer.lower().startswith("bearer ") and auth.check_token(bearer[7:].strip()):
                    return await call_next(request)
            if session is None:
                if request.method == "GET" and path != "/metrics":
                    return RedirectResponse("/login", status_code=303)
                return PlainTextResponse("pgfence dashboard: authentication required\n", status_code=401)
            request.scope["pgfence.session"] = session
            request.scope["pgfence.actor"] = session.actor
            return await call_next(request)

    async def form_of(request: Request, *, write: bool = True) -> FormData:
        """The POSTed form, after the CSRF check (and, for a write, the read-only check)."""
        form = await request.form()
        session = request.scope.get("pgfence.session")
        given = form.get("csrf")
        if session is None or not isinstance(given, str) or not sec.csrf_ok(session, given):
            raise _Refused(403, "missing or wrong CSRF token: reload the page and try again")
        if write and read_only:
            raise _Refused(403, "this dashboard is read-only")
        return form

    def guarded(fn: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def wrapper(request: Request) -> Response:
            try:
                return await fn(request)
            except _Refused as exc:
                return error_page(request, exc.status, exc.message)
            except psycopg.Error as exc:
                diag = exc.diag
                msg = diag.message_primary or str(exc)
                hint = diag.message_hint
                log.info("database error %s: %s", diag.sqlstate, msg)
                # (psycopg's own refusals, a NUL in a text, have no SQLSTATE)
                return error_page(request, 409 if diag.sqlstate in ("PF002", "PF003") else 400,
                                  (f"{diag.sqlstate}: " if diag.sqlstate else "") + msg
                                  + (f" (hint: {hint})" if hint else ""))
        return wrapper

    # -- login --------------------------------------------------------------
    async def login(request: Request) -> Response:
        if request.method == "GET":
            return render(request, "login.html", failed=False)
        form = await request.form()
        if not auth.enabled or auth.check_token(str(form.get("token", ""))):
            sid, session = auth.new_session()
            session.actor = printable(str(form.get("name") or "").strip()[:64]) or "dashboard"
            resp = RedirectResponse("/", status_code=303)
            resp.set_cookie(sec.SESSION_COOKIE, sid, httponly=True, samesite="strict", secure=config.secure_cookie,
                            max_age=sec.SESSION_SECONDS, path="/")
            log.info("login (%s)", session.actor)
            return resp
        log.warning("failed login from %s", request.client.host if request.client else "?")
        await asyncio.sleep(1.0)  # (a guess per second per connection; the token has 16+ characters)
        return render(request, "login.html", status=401, failed=True)

    async def logout(request: Request) -> Response:
        await form_of(request, write=False)
        auth.end(request.cookies.get(sec.SESSION_COOKIE))
        resp = RedirectResponse("/login", status_code=303)
        resp.delete_cookie(sec.SESSION_COOKIE, path="/")
        return resp

    # -- pages --------------------------------------------------------------
    async def overview(request: Request) -> Response:
        ov = await run_in_threadpool(data.overview)
        tmpl = "overview_live.html" if request.url.path == "/overview/live" else "overview.html"
        return render(request, tmpl, ov=ov, chart=_chart(ov["series"]))

    async def inbox(request: Request) -> Response:
        before = _int(request.query_params.get("before"), "before")
        queue = request.query_params.get("queue") or None
        rows = await run_in_threadpool(data.manual_review, before, queue)
        return render(request, "inbox.html", rows=rows[:d.PAGE], queue=queue,
                      next_before=rows[d.PAGE - 1]["id"] if len(rows) > d.PAGE else None)

    async def jobs(request: Request) -> Response:
        q = request.query_params
        if q.get("status") not in (None, "", *STATES):
            raise _Refused(400, "unknown status")
        f = d.JobFilter(queue=q.get("queue") or None, kind=q.get("kind") or None, status=q.get("status") or None,
                        key=q.get("key") or None, job_id=_int(q.get("id"), "id"), error=q.get("error") or None,
                        after=_time(q.get("after"), "after"), before=_time(q.get("until"), "until"))
        # (the bulk form carries the error search's window: "everything matching this filter"
        # is then no more than the list read)
        rows, window_start = await run_in_threadpool(data.jobs, f, _int(q.get("before"), "before"))
        params = {k: v for k, v in q.items() if k != "before" and v}
        nxt = None
        if len(rows) > d.PAGE:
            nxt = "/jobs?" + urlencode({**params, "before": rows[d.PAGE - 1]["id"]})
        return render(request, "jobs.html", rows=rows[:d.PAGE], f=f, q=params, next_url=nxt,
                      window=fmt_age(d.ERROR_SEARCH_WINDOW),
                      window_start=None if window_start is None else window_start.isoformat())

    async def job(request: Request) -> Response:
        job_id = _int(request.path_params["job_id"], "the job id")
        if job_id is None:
            return error_page(request, 404, "no such job")

        def load() -> Any:
            j = data.job(job_id)
            if j is None:
                return None
            return j, data.attempts(job_id), data.rejections(job_id), data.audit(job_id), data.now()
        got = await run_in_threadpool(load)
        if got is None:
            return error_page(request, 404, f"no job {job_id} (or this role may not see it)")
        j, attempts, rejections, audit, now = got
        return render(request, "job.html", job=j, attempts=attempts, rejections=rejections, audit=audit,
                      tl=build_timeline(j, attempts, rejections, now))

    async def dead(request: Request) -> Response:
        groups = await run_in_threadpool(data.dead_letter)
        return render(request, "dead.html", groups=groups)

    async def audit(request: Request) -> Response:
        rows = await run_in_threadpool(data.audit_log, _int(request.query_params.get("before"), "before"))
        return render(request, "audit.html", rows=rows[:d.PAGE],
                      next_before=rows[d.PAGE - 1]["id"] if len(rows) > d.PAGE else None)

    async def queues(request: Request) -> Response:
        rows, more = await run_in_threadpool(data.queues)
        schedules = await run_in_threadpool(data.schedules)
        return render(request, "queues.html", rows=rows, more=more, schedules=schedules)

    # -- actions ------------------------------------------------------------
    async def job_action(request: Request) -> Response:
        form = await form_of(request)
        job_id = _int(request.path_params["job_id"], "the job id")
        action = str(form.get("action", ""))
        if job_id is None or action not in ACTIONS:
            raise _Refused(400, "unknown action")
        note = str(form.get("note") or "").strip() or None
        result = _result(form)
        if action == "mark_done" and not note:
            raise _Refused(400, "mark done needs a note")
        await run_in_threadpool(data.act, request.scope["pgfence.actor"], action, job_id, note, result)
        log.info("%s job %s by %s", action, job_id, request.scope["pgfence.actor"])
        back = form.get("back")
        # only a path of this site (not //host or /\host, which browsers read as another site)
        if not isinstance(back, str) or not back.startswith("/") or back[1:2] in ("/", "\\"):
            back = f"/jobs/{job_id}"
        return RedirectResponse(back, status_code=303)

    async def bulk(request: Request) -> Response:
        """Selection (``ids``) or filter; without ``confirm`` it previews how many jobs the
        action will touch, with ``confirm`` it acts (one audit row with the ids acted on)."""
        form = await form_of(request)
        action = str(form.get("action", ""))
        if action not in BULK_ACTIONS:
            raise _Refused(400, "unknown action")
        note = str(form.get("note") or "").strip() or None
        result = _result(form)
        # (mark done's note comes with the selection; a purge's is asked for on its preview)
        if action in NOTE_REQUIRED and not note and (action == "mark_done" or form.get("confirm")):
            raise _Refused(400, f"{action.replace('_', ' ')} needs a note")
        actor = request.scope["pgfence.actor"]
        if form.get("mode") == "filter":
            flt = {"status": form.get("status") or None, "queue": _text(form, "queue"),
                   "kind": _text(form, "kind"), "error": _text(form, "error"),
                   "after": _time(form.get("after"), "after"), "before": _time(form.get("until"), "until")}
            if flt["status"] not in (None, *STATES):
                raise _Refused(400, "unknown status")
            if not form.get("confirm"):
                n, cap = await run_in_threadpool(data.preview, action, flt)
                return render(request, "preview.html", action=action, n=n, cap_n=cap, form=form, ids=None,
                              texts={k: flt[k] for k in ("queue", "kind", "error")})
            rows = await run_in_threadpool(data.act_on_filter, actor, action, flt, note, result)
        else:
            ids = sorted({i for i in (_int(v, "a job id") for v in form.getlist("ids")) if i is not None})
            if not ids:
                raise _Refused(400, "select at least one job")
            if len(ids) > d.BULK_CAP:
                raise _Refused(400, f"at most {d.BULK_CAP} jobs per action")
            if not form.get("confirm"):
                return render(request, "preview.html", action=action, n=len(ids), cap_n=d.BULK_CAP, form=form,
                              ids=ids, texts={})
            rows = await run_in_threadpool(data.act_many, actor, action, ids, note, result)
        log.info("bulk %s by %s: %s acted on", action, actor, sum(1 for r in rows if r["acted"]))
        return render(request, "bulk_done.html", action=action, rows=rows,
                      acted=sum(1 for r in rows if r["acted"]))

    async def queue_action(request: Request) -> Response:
        form = await form_of(request)
        action = str(form.get("action", ""))
        queue = _text(form, "queue")
        if action not in ("pause", "resume", "limit") or not queue:
            raise _Refused(400, "unknown action")
        limit = None
        if action == "limit":
            limit = _int(str(form.get("max_running") or "").strip(), "max_running (empty removes the cap)")
        await run_in_threadpool(data.queue_action, request.scope["pgfence.actor"], action, queue, limit)
        log.info("queue %s %s by %s", action, queue, request.scope["pgfence.actor"])
        return RedirectResponse("/queues", status_code=303)

    async def metrics(request: Request) -> Response:
        from .metrics import render as render_metrics
        rows = await run_in_threadpool(data.metrics)
        body, ctype = render_metrics(rows)
        return Response(body, media_type=ctype)

    routes = [
        Route("/", guarded(overview)),
        Route("/overview/live", guarded(overview)),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", guarded(logout), methods=["POST"]),
        Route("/inbox", guarded(inbox)),
        Route("/jobs", guarded(jobs)),
        Route("/jobs/{job_id}", guarded(job)),
        Route("/jobs/{job_id}/action", guarded(job_action), methods=["POST"]),
        Route("/bulk", guarded(bulk), methods=["POST"]),
        Route("/dead", guarded(dead)),
        Route("/queues", guarded(queues)),
        Route("/audit", guarded(audit)),
        Route("/queues/action", guarded(queue_action), methods=["POST"]),
        Route("/metrics", guarded(metrics)),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Starlette(routes=routes, middleware=[Middleware(Guard)])
    app.state.data = data
    app.state.read_only = read_only
    app.state.identity = ident
    app.state.auth = auth
    return app


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _int(text: Any, name: str) -> Optional[int]:
    """A bigint from a query or form value: None when absent or empty. Anything else that is
    not one (``abc``, ``1_0``, other scripts' digits, out of range) is refused, 400: a value
    left out of a filter would widen it, and a bulk action would act on the wider set."""
    if text is None or text == "":
        return None
    raw = text.strip() if isinstance(text, str) else ""
    if not re.fullmatch(r"-?[0-9]{1,19}", raw) or not -(2 ** 63) <= int(raw) < 2 ** 63:
        raise _Refused(400, f"{name} must be a whole number (a bigint)")
    return int(raw)


def _time(text: Any, name: str) -> Optional[datetime]:
    """A time from a query or form value (ISO 8601; without an offset, UTC): None when absent
    or empty, refused (400) when it does not parse, as :func:`_int`."""
    if text is None or text == "":
        return None
    raw = text.strip() if isinstance(text, str) else ""
    if raw.endswith(("Z", "z")):
        raw = raw[:-1] + "+00:00"
    try:
        v = datetime.fromisoformat(raw)
    except ValueError:
        raise _Refused(400, f"{name} must be a time such as 2026-12-01T10:00Z") from None
    return d.as_utc(v)


def _text(form: FormData, name: str) -> Optional[str]:
    """A text field of a form, None when empty: as typed (``name``), or as a page carried a
    database string in a hidden input (``name_json``, a JSON string: a browser sends every
    line break of a form's value as CRLF, so an error's LF would come back as CRLF and match
    nothing)."""
    raw = form.get(name + "_json")
    if raw is None:
        raw = form.get(name)
        if raw is not None and not isinstance(raw, str):
            raise _Refused(400, f"{name} must be text")
        return raw or None
    try:
        value = json.loads(raw) if isinstance(raw, str) else None
    except (ValueError, RecursionError):  # (nested past ~1,000 levels: RecursionError)
        value = None
    if not isinstance(value, str):
        raise _Refused(400, f"{name}_json must be a JSON string")
    return value or None


def _result(form: FormData) -> Optional[str]:
    text = str(form.get("result") or "").strip()
    if not text:
        return None
    try:
        json.loads(text)
    except (ValueError, RecursionError):  # (nested past ~1,000 levels: RecursionError)
        raise _Refused(400, "the result must be JSON (or empty)") from None
    return text


def _chart(series: list[tuple[datetime, dict[str, int]]]) -> dict[str, Any]:
    """Bars of jobs finished per minute (done / failed / cancelled stacked), as SVG geometry."""
    peak = max([sum(v.values()) for _, v in series] + [1])
    bars = []
    w, h = 12.0, 120.0
    for i, (minute, v) in enumerate(series):
        y = h
        parts = []
        for status in ("done", "failed", "cancelled"):
            bh = v[status] / peak * h
            if bh > 0:
                y -= bh
                parts.append({"status": status, "y": y, "h": bh})
        bars.append({"x": 40 + i * w, "parts": parts, "minute": fmt_ts(minute)[11:16], "v": v})
    return {"bars": bars, "peak": peak, "width": 40 + len(series) * w + 10, "height": h,
            "total": sum(sum(v.values()) for _, v in series)}


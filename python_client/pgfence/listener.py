"""The listener: wake the claimer when a job is enqueued for one of the worker's queues.

It holds its own connection (the pool's arguments, autocommit), LISTENs on
``pgfence_enqueue`` and wakes the claimer on each notification that carries one of its
queues' tags (``pgfence.wakeup_tags``; every notification when the database will not
say, or when the worker claims from every queue). A worker claiming from a stored set
also listens for the set's own tag (what define_queue_set and drop_queue_set send:
``set_change_name``), and then reads the set's queues and their tags again. A notification is a hint only: any
role may NOTIFY the channel, so wake-ups are coalesced by the claimer, and a flood
(more than NOTIFY_FLOOD a second) makes the listener stop listening for
NOTIFY_FLOOD_PAUSE seconds while the claimer polls. A lost connection is reconnected
with backoff; after each (re)connection the claimer is woken once, for whatever was
sent while nobody listened.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional, Protocol, Sequence

import psycopg

from ._text import escaped_logger
from .client import Client
from .errors import PgfenceError

log = escaped_logger("pgfence.worker")

#: Notifications within one second beyond which the listener stops listening for a while
#: (any role may NOTIFY pgfence_enqueue), and for how long (seconds).
NOTIFY_FLOOD = 2000
NOTIFY_FLOOD_PAUSE = 5.0
#: The shortest time (seconds) between two reads of the worker's stored set after its
#: tag arrived: a burst of its notifications (anyone may send them) costs one read a second.
SET_REREAD = 1.0


def relisten(conn: psycopg.Connection[Any]) -> None:
    """LISTEN again (it changes nothing) after other statements on the listening
    connection: its last statement is then LISTEN, which is how pg_stat_activity shows
    the worker's listening session to an operator (and to the chaos suite that ends it)."""
    conn.execute("LISTEN pgfence_enqueue")


def set_change_name(queue_set: str) -> str:
    """The name whose wake-up tag (``pgfence.wakeup_tags``) is the NOTIFY payload of a change
    to the stored set ``queue_set`` (defined again, or dropped): a control character, which
    no queue name may hold, then the set's name (``pgfence._queue_set_tag``)."""
    return "\x01" + queue_set


class PoolOwner(Protocol):
    """What gives the listener its connection arguments: a client whose ``pool`` (a
    psycopg_pool ConnectionPool or AsyncConnectionPool) has ``conninfo`` and ``kwargs``."""

    @property
    def pool(self) -> Any: ...


class Listener:
    """Wakes the claimer (``wake()``) on NOTIFY pgfence_enqueue for ``queues`` (None:
    all; or the queues of the stored set ``queue_set``, read when it connects), until
    ``done`` is set. ``client``: the worker's Client (or AsyncClient: the
    asyncio worker runs this listener on a thread), whose pool gives the connection
    arguments."""

    def __init__(self, client: PoolOwner, queues: Optional[Sequence[str]], *, worker_id: str,
                 wake: Callable[[], None], done: threading.Event, queue_set: Optional[str] = None) -> None:
        self.client = client
        self.queues = None if queues is None else list(queues)
        self.queue_set = queue_set
        self.worker_id = worker_id
        self.wake = wake
        self.done = done

    def run(self) -> None:
        backoff = 0.1
        while not self.done.is_set():
            try:
                with psycopg.connect(self.conninfo(), **self.connect_kwargs()) as conn:
                    # The channel carries a tag per queue, not its name: ask the database
                    # which tags are ours (None: every notification is ours). LISTEN first,
                    # so a set defined again while they are read is heard.
                    conn.execute("LISTEN pgfence_enqueue")
                    set_tag = None if self.queue_set is None else self.set_tag(conn)
                    tags = None if self.queues is None and self.queue_set is None else self.wakeup_tags(conn)
                    relisten(conn)
                    backoff = 0.1
                    self.wake()  # anything sent while we were not listening
                    self.listen(conn, tags, set_tag)
            except psycopg.Error as exc:
                if self.done.is_set():
                    return
                log.warning("worker %s: listener connection lost (%s); reconnecting in %.1fs",
                            self.worker_id, str(exc).strip(), backoff)
                self.done.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def set_tag(self, conn: psycopg.Connection[Any]) -> Optional[str]:
        """The NOTIFY payload of a change to this worker's stored set; None when the database
        refuses to say (the set's changes then reach this worker at its next connection)."""
        assert self.queue_set is not None
        name = set_change_name(self.queue_set)
        try:
            return Client(conn, check_schema=False).wakeup_tags([name]).get(name)
        except psycopg.OperationalError:
            raise  # the connection: the listener reconnects
        except (PgfenceError, psycopg.Error) as exc:
            log.warning("worker %s: cannot read the wake-up tag of queue set %s (%s); it is read again at the next "
                        "connection only", self.worker_id, self.queue_set, str(exc).strip())
            return None

    def wakeup_tags(self, conn: psycopg.Connection[Any], warn: bool = True) -> Optional[set[str]]:
        """The NOTIFY payloads of this worker's queues; None (wake on every notification)
        when the database refuses to say (a role without pgfence_worker's grants, say), or
        the worker's stored set is not defined (``warn``: log that)."""
        try:
            client = Client(conn, check_schema=False)
            names = self.queues or []
            if self.queue_set is not None:
                found = [s.names for s in client.queue_sets() if s.queue_set == self.queue_set]
                if not found:
                    if warn:
                        log.warning("worker %s: queue set %s is not defined; every notification wakes it",
                                    self.worker_id, self.queue_set)
                    return None
                names = found[0]
            return set(client.wakeup_tags(names).values())
        except psycopg.OperationalError:
            raise  # the connection: the listener reconnects
        except (PgfenceError, psycopg.Error) as exc:
            log.warning("worker %s: cannot read the wake-up tags of its queues (%s); every notification wakes it",
                        self.worker_id, str(exc).strip())
            return None

    def listen(self, conn: psycopg.Connection[Any], tags: Optional[set[str]], set_tag: Optional[str] = None) -> None:
        """Wake the claimer on each notification that carries one of ``tags``; after one
        that carries ``set_tag`` (the worker's stored set was defined again or dropped),
        read the set's tags again and wake the claimer, at most once per SET_REREAD s (the
        notifications of that second coalesce into the next read). Any role may NOTIFY
        on the channel: more than NOTIFY_FLOOD notifications within a second (set_tag's
        included) make the listener stop listening for NOTIFY_FLOOD_PAUSE seconds (the
        claimer polls meanwhile, and the set is read again after), so a flood costs this
        process a bounded share of a core, and the server holds no notification queue for
        it."""
        window_start, seen = time.monotonic(), 0
        set_changed, next_read = False, 0.0
        while not self.done.is_set():
            flooded = False
            wait = 0.5 if not set_changed else max(0.0, next_read - time.monotonic())
            for note in conn.notifies(timeout=wait):
                if set_tag is not None and note.payload == set_tag:
                    set_changed = True
                elif tags is None or note.payload in tags:
                    self.wake()
                seen += 1
                if seen > NOTIFY_FLOOD:
                    now = time.monotonic()
                    if now - window_start < 1.0:
                        flooded = True
                        break
                    window_start, seen = now, 0
                if set_changed and time.monotonic() >= next_read:
                    break
            # (A break drops the rest of what notifies() had taken: the read below, or the
            # end of a flood pause, wakes the claimer for whatever that was.)
            if set_changed and (flooded or time.monotonic() >= next_read):
                tags = self.reread(conn, tags)
                set_changed, next_read = False, time.monotonic() + SET_REREAD
            if not flooded:
                continue
            conn.execute("UNLISTEN pgfence_enqueue")
            log.warning("worker %s: more than %s notifications on pgfence_enqueue within a second; not listening for "
                        "%ss (claiming every poll_interval meanwhile)", self.worker_id, NOTIFY_FLOOD, NOTIFY_FLOOD_PAUSE)
            if self.done.wait(NOTIFY_FLOOD_PAUSE):
                return
            conn.execute("LISTEN pgfence_enqueue")
            if set_tag is not None:
                tags = self.reread(conn, tags)  # (a change during the pause was not heard)
            self.wake()
            window_start, seen = time.monotonic(), 0

    def reread(self, conn: psycopg.Connection[Any], tags: Optional[set[str]]) -> Optional[set[str]]:
        """The worker's set read again (after its tag arrived): its queues' tags, and a
        wake-up for the claimer."""
        tags_now = self.wakeup_tags(conn, warn=tags is not None)
        relisten(conn)
        if tags_now != tags:
            log.info("worker %s: queue set %s changed; waking on %s", self.worker_id, self.queue_set,
                     "every notification" if tags_now is None else f"the tags of {len(tags_now)} queues")
        self.wake()
        return tags_now

    def conninfo(self) -> str:
        assert self.client.pool is not None
        info = self.client.pool.conninfo
        return info() if callable(info) else info

    def connect_kwargs(self) -> dict[str, Any]:
        """The pool's connection arguments (host, user, ... given to Client.connect as
        keywords), for the listener's own connection."""
        assert self.client.pool is not None
        given = self.client.pool.kwargs
        kwargs = dict((given() if callable(given) else given) or {})
        kwargs["autocommit"] = True
        return kwargs


__all__ = ["Listener", "NOTIFY_FLOOD", "NOTIFY_FLOOD_PAUSE", "SET_REREAD", "set_change_name"]

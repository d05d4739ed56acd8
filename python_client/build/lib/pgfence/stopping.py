"""Stopping a worker: its stop state, and SIGTERM/SIGINT.

:class:`Stop` holds three events that every part of a worker reads:

* ``stopping``: a graceful shutdown began (``Worker.stop()``, or the first signal):
  claim no more, start no handler; a handler polling ``job.should_stop()`` sees it.
* ``hurry``: a second signal: give running jobs back at once, and stop retrying calls
  to an unreachable database (what cannot be reported is left to the leases).
* ``done``: the background threads (flusher, heartbeats, listener, sweeper) exit.

:func:`install_signals` routes SIGTERM/SIGINT to a callback on a watcher thread.
"""

from __future__ import annotations

import signal
import socket
import threading
from types import FrameType
from typing import Callable, Optional

from ._text import escaped_logger

log = escaped_logger("pgfence.worker")


class Stop:
    """A worker's stop state (see the module's docstring)."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.hurry = threading.Event()
        self.done = threading.Event()
        self.signals = 0

    def signal(self, signum: int, worker_id: str) -> bool:
        """Count a SIGTERM/SIGINT; returns True when it is the second (or later), which
        also sets ``hurry``. (The caller then begins, or hurries, the shutdown.)"""
        self.signals += 1
        if self.signals > 1:
            log.warning("worker %s: second signal, giving running jobs back now (and not waiting for an "
                        "unreachable database)", worker_id)
            self.hurry.set()
            return True
        log.info("worker %s: %s received, shutting down", worker_id, signal.Signals(signum).name)
        return False


def _ignore_signal(signum: int, frame: Optional[FrameType]) -> None:
    """Installed for SIGTERM/SIGINT while a worker runs: the work is done by the watcher
    thread that set_wakeup_fd wakes (see install_signals)."""


def install_signals(on_signal: Callable[[int], None]) -> Callable[[], None]:
    """Make SIGTERM/SIGINT call ``on_signal(signum)``; returns the function that puts the
    previous handlers back. Does nothing off the main thread (Python delivers signals to
    the main thread only).

    Python runs a signal handler in the main thread between two bytecodes, possibly
    while that thread holds the lock of an Event that the handler would set: a handler
    calling stop() deadlocked (about 3% of SIGTERMs under load). So the handler does
    nothing; the signal number reaches a watcher thread through signal.set_wakeup_fd,
    and the watcher calls ``on_signal``."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    ours = (signal.SIGTERM, signal.SIGINT)
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    old_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    old = {s: signal.signal(s, _ignore_signal) for s in ours}

    def watch() -> None:
        while True:
            try:
                data = reader.recv(64)
            except OSError:
                return
            for signum in data:
                if signum == 0:  # restore() is done with us
                    return
                if signum in ours:
                    on_signal(signum)

    watcher = threading.Thread(target=watch, name="pgfence-signals", daemon=True)
    watcher.start()

    def restore() -> None:
        signal.set_wakeup_fd(old_fd)
        for s, h in old.items():
            signal.signal(s, h)
        try:
            writer.send(b"\0")
        except OSError:
            pass
        watcher.join(timeout=5)
        reader.close()
        writer.close()
    return restore


__all__ = ["Stop", "install_signals"]

"""A Ctrl-C that DuckDB takes: noted, so that it can still be reported as the interrupt; and a call
run on a worker thread that a Ctrl-C or a deadline stops at once (``interruptible``).

A Ctrl-C during a DuckDB query does not reach the caller as ``KeyboardInterrupt``: DuckDB takes it
and raises its own error (``RuntimeError('Query interrupted')``, or an ``InvalidInputException``
that names it while scanning a Python object; inside a transaction the clean-up's next query then
fails on the aborted transaction). ``noting_interrupts`` notes the signal, so that the caller (a
registry transaction, the CLI) can raise or report the interrupt instead of an internal error.
A long DuckDB aggregate run with more than one thread notices no Ctrl-C until it ends: the
registry's read queries run through ``interruptible``, which waits on another thread and interrupts
the query itself.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(eq=False)  # each block's own: found in _ACTIVE by identity
class Noted:
    hit: bool = False  # a Ctrl-C came during the block


@contextlib.contextmanager
def noting_interrupts() -> Iterator[Noted]:
    """Note a Ctrl-C during the block (``Noted.hit``), then raise KeyboardInterrupt as Python does.
    Nested blocks each note it. Only the main thread gets signals; elsewhere, or under a handler of
    the caller's own, nothing is changed (and nothing noted). The previous handler is back when the
    block ends, also when a Ctrl-C lands while it is put back."""
    noted = Noted()
    previous = signal.getsignal(signal.SIGINT)
    if not _replaceable(previous):
        yield noted
        return
    _ACTIVE.append(noted)
    try:
        yield from _noting(noted, previous)
    finally:
        _ACTIVE.remove(noted)


def handled() -> None:
    """A Ctrl-C noted so far has been dealt with (a prompt that stopped a query and goes on): the
    enclosing blocks forget it, so a later error is not taken for it."""
    for noted in list(_ACTIVE):
        noted.hit = False


def _noting(noted: Noted, previous) -> Iterator[Noted]:
    """The block with ``note`` as the SIGINT handler, ``previous`` put back after it."""

    def note(signum, frame):
        noted.hit = True
        previous(signum, frame)  # an outer block's note, or Python's KeyboardInterrupt

    setattr(note, _NOTING, True)
    try:
        signal.signal(signal.SIGINT, note)
        yield noted
    finally:
        try:
            signal.signal(signal.SIGINT, previous)
        except KeyboardInterrupt:  # a Ctrl-C handled just before the swap: swap, then raise it
            signal.signal(signal.SIGINT, previous)
            raise


def _replaceable(handler) -> bool:
    """Whether this module may put its own SIGINT handler in place of ``handler``: on the main
    thread (the only one that gets signals), over Python's handler or a noting block's, never a
    caller's own."""
    return threading.current_thread() is threading.main_thread() and (
        handler is signal.default_int_handler or getattr(handler, _NOTING, False)
    )


_ACTIVE: list[Noted] = []  # the noting blocks open now (main thread), outermost first
_NOTING = "_supportbench_noting"  # marks a handler of this module's: a nested block chains to it


def interruptible(
    work: Callable[[], T], interrupt: Callable[[], None], seconds: float, name: str = "worker"
) -> T:
    """``work()``'s result, run on a worker thread (``name``) while this one waits: a Ctrl-C stops
    it at once (``interrupt()``: ``DuckDBPyConnection.interrupt`` for a query) and is raised as
    ``KeyboardInterrupt``; at ``seconds`` it is stopped too, raised as ``TimeoutError``. Either way
    the worker has ended before this returns (``_stop``; a Ctrl-C during the stop makes it
    ``KeyboardInterrupt``); ``work``'s own error is raised as it is. The waits are an Event's:
    Python 3.11's ``Thread.join``, once interrupted, takes a live thread for ended."""
    box: dict[str, Any] = {}
    began, done = threading.Event(), threading.Event()

    def run() -> None:
        began.set()
        try:
            box["value"] = work()
        except BaseException as exc:  # noqa: BLE001 -- handed to the waiting thread
            box["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=run, name=name, daemon=True)
    try:
        worker.start()  # inside: a Ctrl-C can cut start() short once the thread exists
        if not done.wait(seconds):
            raise TimeoutError(seconds)
    except BaseException as exc:  # a Ctrl-C, or the time limit
        if _stop(interrupt, worker, began, done) and not isinstance(exc, KeyboardInterrupt):
            raise KeyboardInterrupt from exc  # a Ctrl-C during the stop is the user's word
        raise
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _stop(
    interrupt: Callable[[], None],
    worker: threading.Thread,
    began: threading.Event,
    done: threading.Event,
) -> bool:
    """Interrupt the worker until it has ended; whether a Ctrl-C came meanwhile. DuckDB clears the
    flag when a query starts, so an interrupt sent before it is lost: it is sent again every 50 ms.
    A further Ctrl-C does not end the wait (DuckDB refuses to close a connection a thread still
    uses, and a thread left inside DuckDB aborts the interpreter's exit): it is only noted, by a
    handler that raises nothing while the stop runs (``_quiet``), or, where one is raised (as that
    handler is put in place or taken away, or under a caller's own handler), caught, and the wait
    taken up where it was. A worker that never began (a Ctrl-C before its thread was launched) has
    nothing to stop: given up after ``_NEVER_BEGAN`` seconds of waiting in all."""
    ctrl_c, waited = False, 0.0
    while True:  # again after a Ctrl-C raised during the stop; waited is kept
        try:
            with _quiet() as quiet:
                while not done.is_set() and (began.is_set() or waited <= _NEVER_BEGAN):
                    if began.is_set():
                        interrupt()
                    done.wait(0.05)
                    waited += 0.05
                if done.is_set():
                    worker.join()
            return ctrl_c or quiet.hit
        except KeyboardInterrupt:
            ctrl_c = True


_NEVER_BEGAN = 5.0  # seconds: a launched thread runs within milliseconds


@contextlib.contextmanager
def _quiet() -> Iterator[Noted]:
    """During the block a Ctrl-C raises nothing: it is noted (``Noted.hit``, and in every noting
    block open, as their handler would). Only on the main thread, replacing Python's handler or a
    noting block's; otherwise nothing is changed. A Ctrl-C handled while the handler is put in
    place raises (``signal.signal`` runs the old handler first): the caller starts again."""
    noted = Noted()
    previous = signal.getsignal(signal.SIGINT)
    if not _replaceable(previous):
        yield noted
        return

    def note(signum, frame):
        for n in (noted, *_ACTIVE):
            n.hit = True

    signal.signal(signal.SIGINT, note)
    try:
        yield noted
    finally:
        signal.signal(signal.SIGINT, previous)

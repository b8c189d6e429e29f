"""A Ctrl-C that DuckDB takes: noted, so that it can still be reported as the interrupt.

A Ctrl-C during a DuckDB query does not reach the caller as ``KeyboardInterrupt``: DuckDB takes it
and raises its own error (``RuntimeError('Query interrupted')``, or an ``InvalidInputException``
that names it while scanning a Python object; inside a transaction the clean-up's next query then
fails on the aborted transaction). ``noting_interrupts`` notes the signal, so that the caller (a
registry transaction, the CLI) can raise or report the interrupt instead of an internal error.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass


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
    if threading.current_thread() is not threading.main_thread() or not (
        previous is signal.default_int_handler or getattr(previous, _NOTING, False)
    ):
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


_ACTIVE: list[Noted] = []  # the noting blocks open now (main thread), outermost first
_NOTING = "_supportbench_noting"  # marks a handler of this module's: a nested block chains to it

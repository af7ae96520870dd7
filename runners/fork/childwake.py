"""The fork server wakes as a claim process exits.

SIGCHLD is caught (by a handler that does nothing) and Python's signal wakeup fd
writes its number into a socket the server's selector watches: the server sleeps
until a request, a client's word or a child's exit, and reaps the claim and tells
its client at once, rather than at its next look on a timer. A signal that
arrives while the server is busy is still in the socket when it next waits.
"""

from __future__ import annotations

import contextlib
import signal
import socket
from types import FrameType

__all__ = ["ChildWake"]


def _nothing(signum: int, frame: FrameType | None) -> None:
    """The signal's work is done by the wakeup fd; a handler must exist for it to be
    written (SIGCHLD's default is to ignore it)."""


class ChildWake:
    """The socket that becomes readable when a child of this process exits."""

    def __init__(self) -> None:
        self.sock, self._w = socket.socketpair()
        self.sock.setblocking(False)
        self._w.setblocking(False)
        signal.set_wakeup_fd(self._w.fileno(), warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, _nothing)

    def drain(self) -> None:
        """Take what the signals wrote: the selector reports the socket again only
        after the next one."""
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while self.sock.recv(4096):
                pass

    def close_in_child(self) -> None:
        """In a forked claim process: SIGCHLD back to its default and no wakeup fd, so
        the claim's own signals and children never reach the server."""
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        self.sock.close()
        self._w.close()

"""The fork server's client as its callers start it: one command line.

A claim forked from a fork server runs as ``python -m runners.fork.forkclient SOCK
MODULE REQUEST RESULT``; the client asks the server at ``SOCK`` to run ``MODULE`` on
the request and result files, as ``python -m MODULE REQUEST RESULT`` would. Here, in
the contract, so the parent's handles (`runners.fork.forkparent`) and a check that
starts a process of its own (gradient-compare's arms) name the same line without the
check importing the fork server's room, above it. Imports nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["CLIENT_MODULE", "client_argv"]

CLIENT_MODULE = "runners.fork.forkclient"
"""The client a forked claim runs (no torch)."""


def client_argv(sock: Path | str, module: str, request: Path, result: Path) -> list[str]:
    """The command line of a client of the server at ``sock`` that runs ``module``."""
    return [sys.executable, "-m", CLIENT_MODULE, str(sock), module, str(request), str(result)]

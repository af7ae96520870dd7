"""The fork client with the claim's move into its pids cgroup skipped, as a host where
that write silently did nothing would leave it: a test's stand-in, run in the client's
place (``python -m tests.ledger.sandbox.unmoved_client SOCK MODULE REQ RES``)."""

from __future__ import annotations

import sys

from runners.fork import forkclient


def _not_moved(pid: int | None) -> str | None:
    return None


forkclient._into_pids = _not_moved

if __name__ == "__main__":
    sys.exit(forkclient.main(sys.argv[1:]))

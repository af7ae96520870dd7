"""Prints the pids cgroup of the process that runs it, as that process sees it: what a
claim that asked the fork server for a process of its own got
(``python -m tests.ledger.sandbox.pids_seen REQ RES``, through a fork client)."""

from __future__ import annotations

import sys

with open("/proc/self/cgroup") as f:
    found = [line.split(":", 2)[2] for line in f.read().splitlines() if ":pids:" in line]
sys.stdout.write(f"pids cgroup {found[0] if found else 'none'}\n")

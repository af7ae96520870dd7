"""Run as a forked claim process (`tests/runners/fork/test_claim_confinement.py`): writes
its host pid as it was told it and its own pid to the result path, says ready, and
waits for its standard input to close."""

from __future__ import annotations

import os
import sys

from runners.harness.hostpid import host_pid

if __name__ == "__main__":
    with open(sys.argv[2], "w") as f:
        f.write(f"{host_pid()} {os.getpid()}")
    print("ready", flush=True)
    sys.stdin.read()

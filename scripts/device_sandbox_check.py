"""On a GPU host (through the device tool): which sandbox routes work there, and the
self-test of each with the host's GPUs given (`ledger.sandbox.proof`). Prints one
JSON document: the kernel, whether unprivileged user namespaces are allowed, the
bubblewrap found, and per route its self-test summary or why it was refused."""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
from pathlib import Path


def main() -> int:
    from ledger.sandbox import find_bwrap, resolve

    def read(path: str) -> str | None:
        try:
            return Path(path).read_text().strip()
        except OSError:
            return None

    out: dict[str, object] = {
        "kernel": platform.release(),
        "max_user_namespaces": read("/proc/sys/user/max_user_namespaces"),
        "unprivileged_userns_clone": read("/proc/sys/kernel/unprivileged_userns_clone"),
        "apparmor_restrict_unprivileged_userns": read(
            "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"
        ),
        "euid": os.geteuid(),
        "bwrap": find_bwrap(),
        "python": sys.executable,
        "devices": sorted(str(p) for p in Path("/dev").glob("nvidia*")),
        "routes": {},
    }
    routes: dict[str, object] = {}
    for route in ("userns", "rootmap"):
        try:
            box = resolve("auto", environ={**os.environ, "LEDGER_SANDBOX_ROUTE": route})
            scratch = tempfile.mkdtemp(prefix="ledger-check-")
            proof = box.prove(box.policy(scratch=scratch))
            routes[route] = {
                "summary": proof.summary,
                "host_uid": proof.host_uid,
                "ok": proof.ok,
                "proc": box.base.proc,
            }
        except Exception as e:  # each route's refusal is a finding here
            routes[route] = {"refused": f"{type(e).__name__}: {e}"}
    out["routes"] = routes
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

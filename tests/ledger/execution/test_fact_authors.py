"""Every fact of a receipt has an author, and a claim writes only its own.

The claim process imported the pull request's code, so whatever its result says is
that code's word. These attacks each rewrite what a claim hands back (its result
document, its exit) from inside the claim, as a pull request can; each is run
through `ledger qualify` in the sandbox, its receipt read back signed from a real
SQLite ledger:

- a result that names another host, another GPU and an 8 x H200 CUDA scope on a CPU
  run: the receipt carries the host's own readings, the claim's words kept as
  reported;
- a result with escape sequences in its host name and a phase time of 1e300 under
  an escape-sequence name: malformed, so the claim failed, the problem quoted;
- a claim that writes ``RESULT.refused`` and exits 75 (a fork refusal's status), one
  that adds an unknown key to its result, one that hangs: each is failed, none an
  infra-error (only the parent's own evidence makes one);
- a float nanosecond figure or a failure without a reason, which no statement can
  carry: failed, where the whole run once recorded nothing.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import platform
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from ledger.cli import main
from ledger.sandbox import find_bwrap
from tests.ledger.helpers import run
from tests.ledger.probe_repo import PROBE, claim, make_probe_repo

pytestmark = pytest.mark.skipif(
    find_bwrap() is None and os.environ.get("CI") != "true", reason="no bubblewrap"
)

# Rewrites the claim's result document as it is written (the harness writes it with
# json.dumps), by mode; patched at import, so in the fork server and every claim.
ATTACK = (
    PROBE
    + """
import json as _json

_dumps = _json.dumps
MODE = {"mode": None}


def _forged(obj, *a, **k):
    if isinstance(obj, list) and obj and isinstance(obj[0], dict) and "scope" in obj[0]:
        for r in obj:
            if MODE["mode"] == "lies":
                r["host"] = "<b onclick=x>runner-7</b>"
                r["gpu_uuids"] = ["GPU-00000000-1111-2222-3333-444444444444"]
                r["scope"].update(
                    device_kind="cuda", gpu_model="NVIDIA H200", gpu_count=8, torch="9.9.9"
                )
            elif MODE["mode"] == "escapes":
                r["host"] = "evil\\x1b]52;c;cm0gLXJmIH4K\\x07"
                r["measurements"]["harness_phase_times"] = {"\\x1b[2J": 1e300}
            elif MODE["mode"] == "unknown-key":
                r["verdict_by"] = "the pull request"
            elif MODE["mode"] == "float-ns":
                r["measurements"]["steps"] = {"warm_ns": 1.5}
            elif MODE["mode"] == "no-reason":
                r["outcome"], r["reason"] = "failed", None
    return _dumps(obj, *a, **k)


_json.dumps = _forged


class Attack(Probe):
    def setup(self, device, seed):
        MODE["mode"] = self.mode
        if self.mode == "exit75":
            # What a refused fork's client leaves, written by the claim itself.
            with open(sys.argv[2] + ".refused", "w") as f:
                f.write("fork refused: XID 79 \\x1b[2J GPU has fallen off the bus")
            os._exit(75)
        super().setup(device, seed)


def make_workload(mode="plain"):
    return Attack(mode)
"""
)

_CLAIMS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("a.lies", "lies", {}),
    ("b.escapes", "escapes", {}),
    ("c.exit75", "exit75", {}),
    ("d.unknown", "unknown-key", {}),
    ("e.hangs", "hang", {"timeout_s": "8"}),
    ("f.honest", "plain", {}),
    ("g.float_ns", "float-ns", {}),
    ("h.no_reason", "no-reason", {}),
)
CLAIMS = "".join(claim(name, mode, **extra) for name, mode, extra in _CLAIMS)


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Any]]]:
    """One `ledger qualify` of the attacks, in the sandbox, into a fresh SQLite ledger:
    each claim's signed predicate, read back from the ledger."""
    tmp = tmp_path_factory.mktemp("authors")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LEDGER_DB", str(tmp / "l.db"))
        mp.setenv("LEDGER_CACHE", str(tmp / "cache"))
        mp.setenv("LEDGER_KEYS", str(tmp / "keys"))
        assert _cli("init")[0] == 0
        assert _cli("keys", "new", "runner", "--role", "runner")[0] == 0
        repo = make_probe_repo(tmp / "repo", CLAIMS, source=ATTACK)
        _, out, err = _cli("qualify", "--rev", "HEAD", "--repo", str(repo), "--json")
        rows = {x["claim"]: x for x in json.loads(out or "{}").get("receipts", [])}
        assert set(rows) == {n for n, _, _ in _CLAIMS}, err
        preds = {}
        for c, x in rows.items():
            shown = json.loads(_cli("show", x["id"], "--json")[1])
            preds[c] = dict(shown["statement"]["predicate"])
        yield preds


def test_a_claim_names_neither_the_host_nor_its_gpus_nor_its_scope(
    signed: dict[str, dict[str, Any]],
) -> None:
    # The receipt names this host, no GPU, a CPU scope and this torch; what the claim
    # said stays in its measurements, as its own report.
    lies = signed["a.lies"]
    assert lies["runner"]["host"] == socket.gethostname()
    assert lies["runner"]["gpu_uuids"] == []
    scope = lies["scope"]
    assert scope["device_kind"] == "cpu" and scope["gpu_model"] == "none", scope
    assert scope["gpu_count"] == 0 and scope["torch"] == torch.__version__
    assert scope["python"] == platform.python_version()
    said = lies["measurements"]["reported_facts"]
    assert said["gpu_model"] == "NVIDIA H200" and said["gpu_count"] == 8
    assert said["host"] == "<b onclick=x>runner-7</b>"
    # Its own figures stand as reported (the outside views judge those).
    assert lies["outcome"] == "passed", lies["reason"]


def test_an_unprintable_host_or_an_out_of_range_phase_time_fails_the_claim(
    signed: dict[str, dict[str, Any]],
) -> None:
    esc = signed["b.escapes"]
    assert esc["outcome"] == "failed", esc["reason"]
    assert "malformed" in esc["reason"], esc["reason"]
    assert "\x1b" not in json.dumps(esc, ensure_ascii=False)  # quoted, never sent
    assert esc["runner"]["host"] == socket.gethostname()


def test_exit_75_with_a_refusal_note_is_the_claims_own_failure(
    signed: dict[str, dict[str, Any]],
) -> None:
    p = signed["c.exit75"]
    assert p["outcome"] == "failed", p["reason"]
    assert "status 75" in p["reason"] and "refused the claim" not in p["reason"]


def test_an_unknown_key_in_the_result_fails_the_claim(
    signed: dict[str, dict[str, Any]],
) -> None:
    p = signed["d.unknown"]
    assert p["outcome"] == "failed", p["reason"]
    assert "verdict_by" in p["reason"]


def test_a_hang_is_the_claims_own_failure(signed: dict[str, dict[str, Any]]) -> None:
    p = signed["e.hangs"]
    assert p["outcome"] == "failed", p["reason"]
    assert "timed out after 8 s" in p["reason"]


def test_a_report_no_statement_can_carry_fails_its_claim_alone(
    signed: dict[str, dict[str, Any]],
) -> None:
    # A float nanosecond figure, a failure without a reason: once the statement of such
    # a result could not be built, and the whole run recorded nothing, its other claims'
    # receipts (the fixture's six others) included.
    for name, what in (("g.float_ns", "exact integer"), ("h.no_reason", "needs a reason")):
        p = signed[name]
        assert p["outcome"] == "failed" and what in p["reason"], p["reason"]


def test_an_honest_claim_keeps_the_scope_it_computed_itself(
    signed: dict[str, dict[str, Any]],
) -> None:
    # Every host facet the claim process computed (as earlier releases signed them)
    # equals the parent's reading: none was kept as differing.
    honest = signed["f.honest"]
    assert honest["outcome"] == "passed", honest["reason"]
    assert "reported_facts" not in honest["measurements"], honest["measurements"]
    assert honest["runner"]["host"] == socket.gethostname()
    assert len(honest["scope"]["packages_digest"]) == 64


def test_fleet_shows_the_host_strings_of_earlier_receipts_escaped(
    tmp_path: Path,
    ledger_env: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # An earlier release signed the host and GPU UUIDs a claim's result named, by a key
    # registered as it registered them (no hosts). Today ingest refuses such names, and
    # writes nothing.
    from ledger.evidence.keys import KeyDir
    from ledger.store.store import Store
    from ledger.write.ingest import register_key

    old = KeyDir(key_dir).create("old")
    register_key(Store.open(f"sqlite:///{ledger_env / 'l.db'}"), "old", "runner", old.public)
    repo = make_probe_repo(tmp_path / "repo", claim("a.old"))
    evil = "<b>h</b>\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2J"
    args = (
        "attest", "--unplanned", "--claim", "a.old", "--rev", "HEAD", "--repo", str(repo),
        "--outcome", "failed", "--reason", "r", "--key", "old",
        "--host", evil, "--gpu-uuid", "GPU-1\x1b[31m",
    )  # fmt: skip
    r = run(capsys, *args)
    assert r.code == 1 and "runner.host" in r.err and "is not printable text" in r.err
    assert "\x1b" not in r.err
    # Such a receipt, logged as the earlier release logged it (no check of names), keeps
    # its bytes, and `ledger fleet` shows them escaped, never sent to the terminal.
    import ledger.write.ingest as ingest

    monkeypatch.setattr(ingest, "check_names", lambda p: None)
    r = run(capsys, *args)
    assert r.code == 0, r.err
    r = run(capsys, "fleet")
    assert r.code == 0, r.err
    assert "\x1b" not in r.out and "\x07" not in r.out
    assert "<b>h</b>\\x1b]52;c;cm0gLXJmIH4K\\x07\\x1b[2J" in r.out
    assert "GPU-1\\x1b[31m" in r.out
    # The JSON form carries the bytes, escaped by JSON itself.
    assert "\x1b" not in run(capsys, "fleet", "--json").out

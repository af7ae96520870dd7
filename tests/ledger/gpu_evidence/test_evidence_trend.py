"""`ledger trend` on a committed ledger (evidence/cpu-trend, made by
`scripts/trend_evidence.py`): receipts of real `ledger qualify` runs on a CPU, on
two commits of a base branch and three heads of PR 2, checked offline on a copy.

The repository the receipts speak of is committed as a git bundle beside the
ledger; the test unpacks it with the remote URL the receipts name, so that trend
finds the base branch's commits and the PR's head without a network. Nothing
under evidence/ is written.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ledger.evidence.keys import key_id, load_public_pem
from ledger.qualification.figures import figure_of
from ledger.read.humanize import iec, number
from ledger.verify import verify_bundle
from tests.ledger.helpers import run

RUN = Path(__file__).resolve().parents[3] / "evidence" / "cpu-trend"
PR = 2
REMOTE = "https://example.invalid/ledger/moe-trend.git"
ADMISSION, PREFIX = "admission.no-oom-after-admit", "backward.full-prefix"
WHERE = ["base", "base", f"PR #{PR} head 1", f"PR #{PR} head 2", f"PR #{PR} head 3"]

pytestmark = pytest.mark.skipif(not RUN.is_dir(), reason="evidence/cpu-trend is not committed")

# A float's repr (0.20741859546811559) and a byte count without its unit (301989888).
FLOAT_REPR = re.compile(r"(?<![\w.])\d+\.\d{4,}(?![\w.])")
RAW_COUNT = re.compile(r"(?<![\w.:/-])\d{5,}(?![\w.])")


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def aside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ledger copied, and the repository unpacked from its bundle under its remote's
    URL: main as origin/main, the PR's last head as refs/pull/2/head."""
    d = tmp_path_factory.mktemp("cpu-trend")
    shutil.copy(RUN / "ledger.db", d / "ledger.db")
    repo = d / "moe-trend"
    _git("init", "-q", "-b", "main", str(repo))
    _git("-C", str(repo), "remote", "add", "origin", REMOTE)
    refs = ["+refs/heads/*:refs/remotes/origin/*", f"+refs/pull/{PR}/head:refs/pull/{PR}/head"]
    _git("-C", str(repo), "fetch", "-q", str(RUN / "repo.bundle"), *refs)
    return d


def _cli(capsys: pytest.CaptureFixture[str], aside: Path, *args: str) -> str:
    r = run(capsys, *args, "--db", str(aside / "ledger.db"))
    assert r.code == 0, (args, r.out, r.err)
    return r.out


def _trend(capsys: pytest.CaptureFixture[str], aside: Path, *extra: str) -> str:
    repo = str(aside / "moe-trend")
    claims = ("--claim", ADMISSION, "--claim", PREFIX)
    return _cli(
        capsys, aside, "trend", "--repo", repo, "--pr", str(PR), "--offline", *claims, *extra
    )


def _commits(aside: Path) -> list[str]:
    """The base branch's two commits (oldest first), then the PR's three heads."""
    repo = str(aside / "moe-trend")
    base = _git("-C", repo, "rev-list", "--first-parent", "--reverse", "origin/main").split()
    heads = _git("-C", repo, "rev-list", "--reverse", f"origin/main..refs/pull/{PR}/head").split()
    return base + heads


def test_trend_follows_each_claim_over_two_base_commits_and_three_pr_heads(
    aside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads(_trend(capsys, aside, "--json"))
    assert doc["repo"] == "example.invalid/ledger/moe-trend" and doc["pr"] == PR
    by_claim = {t["claim"]: t for t in doc["trends"]}
    assert by_claim[ADMISSION]["figure"] == "worst measured/predicted"
    assert by_claim[PREFIX]["figure"] == "peak bytes"
    commits = _commits(aside)
    assert len(commits) == 5
    for t in doc["trends"]:
        points = t["points"]
        assert [p["where"] for p in points] == WHERE
        assert [p["commit"] for p in points] == commits
        assert all(p["figure"] is not None for p in points)
    # The figure really moves with the code: each PR head's admission ratio differs from
    # the one before; the float64 loss (head 1) breaks the estimate, head 2 mends it.
    adm = by_claim[ADMISSION]["points"]
    ratios = [p["figure"]["value"] for p in adm]
    assert len(set(ratios)) == len(ratios)
    assert [p["outcome"] for p in adm] == ["passed", "passed", "failed", "passed", "passed"]
    assert ratios[2] > 1 > max(ratios[3:])
    # What the script wrote is what the CLI prints over the committed ledger, less the
    # keys added since (none of which this ledger gives a value beyond the obvious).
    for t in doc["trends"]:
        assert t.pop("base_commits_with_receipts") == 2
        assert t.pop("no_base") is None
        base = t["points"][1]
        for p in t["points"]:
            assert p.pop("superseded") == []
            # Each head against the newest base receipt at its scope (the base's and the
            # heads' differ only in workload_digest, the digest of the code changed).
            assert p.pop("scope")["device_kind"] == "cpu"
            change = p.pop("change_vs_base", None)
            assert (change is None) == (p["where"] == "base")
            if change is not None:
                assert change["base_receipt"] == base["receipt"]
                assert change["base_commit"] == base["commit"]
                pct = (p["figure"]["value"] / base["figure"]["value"] - 1) * 100
                assert change["percent"] == float(f"{pct:.3g}")
                assert change["text"] == ("+" if pct > 0 else "-") + f"{number(abs(pct))} %"
            lc = p.pop("least_change_vs_base", None)
            said = p.pop("least_change_text", None)
            assert (lc is not None) == (p["where"] != "base" and t["claim"] == ADMISSION)
            if lc is not None:
                assert lc["base_receipt"] == base["receipt"] and said.startswith(
                    ("least measured/predicted", "estimate tighter than the base's:")
                )
            # Admission's least measured/predicted, from the rows of receipts made
            # before it was recorded as a figure of its own.
            least = p.pop("least", None)
            assert (least is not None) == (t["claim"] == ADMISSION)
            if least is not None:
                assert least["name"] == "least measured/predicted"
                assert 0 < least["value"] <= p["figure"]["value"]
    assert doc == json.loads((RUN / "trend.json").read_text())


def _predicate(capsys: pytest.CaptureFixture[str], aside: Path, rid: str) -> dict[str, Any]:
    shown = json.loads(_cli(capsys, aside, "show", rid, "--json"))
    return shown["statement"]["predicate"]  # type: ignore[no-any-return]


def test_each_figure_is_the_one_its_receipt_holds(
    aside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads(_trend(capsys, aside, "--json"))
    for t in doc["trends"]:
        for p in t["points"]:
            pred = _predicate(capsys, aside, p["receipt"])
            assert pred["claim"] == t["claim"] and pred["outcome"] == p["outcome"]
            assert pred["source"]["commit"] == p["commit"]
            assert pred["source"]["pr"] == (None if p["where"] == "base" else PR)
            assert pred["scope"]["device_kind"] == "cpu" and pred["scope"]["sandbox"] == "bwrap"
            m, fig = pred["measurements"], p["figure"]
            if t["claim"] == ADMISSION:
                assert fig["value"] == m["max_measured_over_predicted"]
                assert fig["text"] == f"{number(fig['value'])}x"
            else:
                assert fig["value"] == m["process_peak_bytes"] and fig["unit"] == "bytes"
                assert fig["text"] == iec(fig["value"])
            found = figure_of(pred)
            assert found is not None and found.to_json() == fig


def test_the_terminal_output_reads_in_units(
    aside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _trend(capsys, aside)
    # Less the lines added since: each head's change in % against the newest base
    # receipt at its scope, and its least measured/predicted against the base's.
    added = [x for x in text.splitlines() if x.startswith("    ")]
    changes = [x for x in added if " vs base a6f49e187f1d (" in x]
    assert len(changes) == 6 and all(x.startswith("    +") for x in changes), added
    assert len([x for x in added if "least measured/predicted" in x]) == 3, added
    kept = [x for x in text.splitlines(keepends=True) if x.rstrip("\n") not in added]
    assert "".join(kept) == (RUN / "trend.txt").read_text()
    doc = json.loads(_trend(capsys, aside, "--json"))
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    for t in doc["trends"]:
        for p in t["points"]:
            [line] = [x for x in lines if p["commit"][:12] in x and p["receipt"][7:19] in x]
            assert line.strip().startswith(p["where"] + " ")
            fig = p["figure"]["text"]
            assert f" {fig} " in line and p["outcome"] in line
            digits = re.sub(r"\D", "", fig.split()[0]).lstrip("0")
            assert len(digits) <= 3, fig  # three significant digits
            if p["figure"]["unit"] == "bytes":
                assert fig.endswith((" KiB", " MiB", " GiB")), fig
    ids = {p["commit"][:12] for t in doc["trends"] for p in t["points"]}
    ids |= {p["receipt"][7:19] for t in doc["trends"] for p in t["points"]}
    # A small percentage has leading zeros (`+0.0777 %`), never more than 3 digits.
    assert [d for d in FLOAT_REPR.findall(text) if len(d.replace(".", "").lstrip("0")) > 3] == []
    assert [n for n in RAW_COUNT.findall(text) if n not in ids] == []


def test_the_receipts_verify_offline(aside: Path, capsys: pytest.CaptureFixture[str]) -> None:
    audit = json.loads(_cli(capsys, aside, "audit", "--json"))
    assert audit["ok"] is True
    ledger_pub = load_public_pem((RUN / "ledger.pub.pem").read_bytes())
    runner = key_id(load_public_pem((RUN / "runner.pub.pem").read_bytes()))
    runs = json.loads((RUN / "runs.json").read_text())["runs"]
    recorded = {rid for r in runs for rid in r["receipts"].values()}
    verified = set()
    for path in sorted((RUN / "bundles").glob("*.json")):
        rep = verify_bundle(path.read_bytes(), [ledger_pub])
        assert rep.anchor.startswith("ledger key ") and rep.signer == runner
        verified.add(rep.id)
    assert verified == recorded and len(recorded) == 10
    doc = json.loads(_trend(capsys, aside, "--json"))
    assert {p["receipt"] for t in doc["trends"] for p in t["points"]} == recorded
    # One through the CLI, with no ledger at all: the bundle and the key suffice.
    bundle = str(sorted((RUN / "bundles").glob("*.json"))[0])
    r = run(
        capsys, "verify", bundle, "--trust", str(RUN / "ledger.pub.pem"), "--db", "/nonexistent"
    )
    assert r.code == 0, r.out + r.err

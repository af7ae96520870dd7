"""`ledger trend`: a claim's figure across the base branch's commits and a PR's
heads, from the receipts alone (a ledger this test builds: two base commits,
three PR heads, each with an admission receipt)."""

from __future__ import annotations

import json
from pathlib import Path

import git
import pytest

from ledger.qualification.figures import figure_of
from ledger.read.render import render_trend
from tests.conftest import commit_file
from tests.ledger.helpers import run

PLAN = """
[[claims]]
name = "admission.no-oom-after-admit"
check = "admission"
cleanup = false
"""
CLAIM = "admission.no-oom-after-admit"


def _attest(
    capsys: pytest.CaptureFixture[str],
    repo: Path,
    tmp: Path,
    ratio: float,
    *rev: str,
    least: float | None = None,
) -> str:
    m = tmp / f"m{ratio}-{least}.json"
    shapes = [
        {
            "shape": "1x64",
            "phase": "forward_nograd",
            "predicted_bytes": 1000,
            "measured_bytes": int(1000 * ratio),
            "measured_over_predicted": ratio,
        }
    ]
    doc: dict[str, object] = {"max_measured_over_predicted": ratio, "shapes": shapes}
    if least is not None:
        doc["min_measured_over_predicted"] = least
    m.write_text(json.dumps(doc))
    res = run(
        capsys,
        "attest",
        "--repo",
        str(repo),
        "--key",
        "h200",
        "--offline",
        "--claim",
        CLAIM,
        "--outcome",
        *(("passed",) if ratio <= 1 else ("failed", "--reason", "measured > predicted")),
        "--measurements",
        str(m),
        *rev,
    )
    assert res.code == 0, res.err
    return res.out.strip()


def test_trend_follows_the_figure_across_base_commits_and_pr_heads(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LEDGER_DB", f"sqlite:///{tmp_path / 'l.db'}")
    for args in (("init",), ("keys", "new", "h200", "--role", "runner")):
        assert run(capsys, *args).code == 0
    r = git.Repo.init(tmp_path / "up", initial_branch="main")
    repo = Path(str(r.working_tree_dir))
    commit_file(r, "qualification.toml", PLAN, "plan")
    b1 = commit_file(r, "model.py", "x = 1\n", "base 1")
    _attest(capsys, repo, tmp_path, 0.91, "--rev", b1)
    b2 = commit_file(r, "model.py", "x = 2\n", "base 2")
    _attest(capsys, repo, tmp_path, 0.92, "--rev", b2)
    r.git.checkout("-b", "feature")
    for i, ratio in enumerate((0.95, 1.07, 0.99), 1):
        head = commit_file(r, "model.py", f"x = {10 + i}\n", f"pr head {i}")
        r.git.update_ref("refs/pull/4/head", head)
        _attest(capsys, repo, tmp_path, ratio, "--pr", "4")
    r.git.checkout("main")
    args = ("trend", "--repo", str(repo), "--pr", "4", "--offline", "--claim", CLAIM)
    doc = json.loads(run(capsys, *args, "--json").out)
    [t] = doc["trends"]
    assert t["figure"] == "worst measured/predicted"
    assert [p["where"] for p in t["points"]] == [
        "base",
        "base",
        "PR #4 head 1",
        "PR #4 head 2",
        "PR #4 head 3",
    ]
    assert [p["figure"]["value"] for p in t["points"]] == [0.91, 0.92, 0.95, 1.07, 0.99]
    assert [p["commit"] for p in t["points"]][:2] == [b1, b2]
    text = run(capsys, *args)
    assert text.code == 0, text.err
    lines = text.out.splitlines()
    assert lines[0].startswith(f"{CLAIM}: worst measured/predicted")
    assert any("PR #4 head 2" in line and "1.07x" in line and "failed" in line for line in lines)
    assert max(len(line) for line in lines) <= 80
    # The PR page draws the same figures, one bar per head.
    import re
    from urllib.parse import urlencode

    import httpx

    from ledger.service.run import start

    srv = start(f"sqlite:///{tmp_path / 'l.db'}", None)
    try:
        q = urlencode({"repo": doc["repo"], "pr": 4})
        page = httpx.get(f"{srv.url}/pr?{q}", headers={"Accept": "text/html"}, timeout=60).text
    finally:
        srv.stop()
    assert "How each figure moved across the heads" in page
    chart = page.split('id="trend-h"', 1)[1].split("</section>", 1)[0]
    assert re.findall(r'class="value"[^>]*>([^<]+)<', chart) == ["0.95", "1.07", "0.99"]


def test_each_check_has_its_figure() -> None:
    grad = {
        "check": {"name": "gradient-compare"},
        "measurements": {"tensors": [{"multiple": 1.5}, {"multiple": 206.0}]},
    }
    assert (f := figure_of(grad)) is not None and f.text == "206x"
    peak = {"check": {"name": "cleanup"}, "measurements": {"process_peak_bytes": 543162368}}
    assert (f := figure_of(peak)) is not None and f.text == "518 MiB" and f.unit == "bytes"
    assert figure_of({"check": {"name": "command"}, "measurements": {}}) is None


def _ledger(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[git.Repo, Path]:
    for args in (("init",), ("keys", "new", "h200", "--role", "runner")):
        assert run(capsys, *args).code == 0
    r = git.Repo.init(tmp_path / "up", initial_branch="main")
    commit_file(r, "qualification.toml", PLAN, "plan")
    commit_file(r, "model.py", "x = 1\n", "base 1")
    return r, Path(str(r.working_tree_dir))


def test_a_superseded_receipt_is_shown_superseded_with_its_figure(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LEDGER_DB", f"sqlite:///{tmp_path / 'l.db'}")
    r, repo = _ledger(tmp_path, capsys)
    _attest(capsys, repo, tmp_path, 0.91, "--rev", "HEAD")
    r.git.checkout("-b", "feature")
    head = commit_file(r, "model.py", "x = 2\n", "pr head 1")
    r.git.update_ref("refs/pull/4/head", head)
    r.git.checkout("main")
    measured = _attest(capsys, repo, tmp_path, 1.28, "--pr", "4")
    sup = run(capsys, "supersede", measured, "--reason", "a noisy neighbour", "--key", "h200")
    assert sup.code == 0, sup.err
    newer = sup.out.strip()
    args = ("trend", "--repo", str(repo), "--pr", "4", "--offline", "--claim", CLAIM)
    [t] = json.loads(run(capsys, *args, "--json").out)["trends"]
    point = t["points"][-1]
    # The head's point is still its newest receipt (the supersession, which measured
    # nothing), and the receipt it replaced stays beside it with its figure.
    assert (point["where"], point["receipt"], point["figure"]) == ("PR #4 head 1", newer, None)
    [old] = point["superseded"]
    assert old["receipt"] == measured and old["outcome"] == "failed"
    assert old["figure"]["value"] == 1.28 and old["superseded_by"] == newer
    assert t["points"][0]["superseded"] == []
    text = run(capsys, *args).out.splitlines()
    at = next(i for i, line in enumerate(text) if "PR #4 head 1" in line)
    assert "passed" in text[at] and "1.28x" not in text[at]
    assert text[at + 1].split()[:4] == ["superseded", head[:12], "1.28x", "failed"]
    assert max(len(line) for line in text) <= 80


def test_a_base_without_receipts_is_said(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LEDGER_DB", f"sqlite:///{tmp_path / 'l.db'}")
    r, repo = _ledger(tmp_path, capsys)
    r.git.checkout("-b", "feature")
    head = commit_file(r, "model.py", "x = 2\n", "pr head 1")
    r.git.update_ref("refs/pull/4/head", head)
    r.git.checkout("main")
    _attest(capsys, repo, tmp_path, 0.95, "--pr", "4")
    args = ("trend", "--repo", str(repo), "--pr", "4", "--offline", "--claim", CLAIM)
    [t] = json.loads(run(capsys, *args, "--json").out)["trends"]
    assert [p["where"] for p in t["points"]] == ["PR #4 head 1"]
    assert t["base_commits_asked"] == 2 and t["base_commits_with_receipts"] == 0
    assert t["no_base"] == "no receipt of this claim on the last 2 base commits"
    [head] = t["points"]
    assert head["change_vs_base"] is None and head["change_vs_base_reason"] == t["no_base"]
    text = run(capsys, *args).out
    assert "no receipt of this claim on the last 2 base commits" in text
    assert "0.95x" in text


def _scope(gpu: str) -> tuple[str, ...]:
    return ("--scope", "device_kind=cuda", "--scope", f"gpu_model={gpu}")


def test_each_head_is_compared_with_the_newest_base_receipt_at_its_scope(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A head's change in % is against the newest base receipt of the same scope,
    never one measured elsewhere; a head at a scope the base never measured says so;
    a looser estimate (admission's least ratio down 1000x) is named against the base's."""
    monkeypatch.setenv("LEDGER_DB", f"sqlite:///{tmp_path / 'l.db'}")
    r, repo = _ledger(tmp_path, capsys)
    b1 = r.head.commit.hexsha
    _attest(capsys, repo, tmp_path, 0.8, "--rev", b1, *_scope("H200"), least=0.81)
    h100 = _attest(capsys, repo, tmp_path, 0.5, "--rev", b1, *_scope("H100"))
    b2 = commit_file(r, "model.py", "x = 2\n", "base 2")
    h200 = _attest(capsys, repo, tmp_path, 0.9, "--rev", b2, *_scope("H200"), least=0.81)
    r.git.checkout("-b", "feature")
    head = commit_file(r, "model.py", "x = 3\n", "pr head 1")
    r.git.update_ref("refs/pull/4/head", head)
    r.git.checkout("main")
    _attest(capsys, repo, tmp_path, 0.99, "--pr", "4", *_scope("H200"), least=0.000837)
    _attest(capsys, repo, tmp_path, 0.6, "--pr", "4", *_scope("H100"))
    _attest(capsys, repo, tmp_path, 0.7, "--pr", "4", *_scope("A10"))
    args = ("trend", "--repo", str(repo), "--pr", "4", "--offline", "--claim", CLAIM)
    [t] = json.loads(run(capsys, *args, "--json").out)["trends"]
    heads = [p for p in t["points"] if p["where"] == "PR #4 head 1"]
    assert [p["scope"]["gpu_model"] for p in heads] == ["H200", "H100", "A10"]
    at_h200, at_h100, at_a10 = (p["change_vs_base"] for p in heads)
    assert at_h200["percent"] == 10.0 and at_h200["text"] == "+10 %"
    assert (at_h200["base_receipt"], at_h200["base_commit"]) == (h200, b2)
    # The newest base commit has no H100 receipt: the older one's is the base.
    assert (at_h100["percent"], at_h100["base_receipt"], at_h100["base_commit"]) == (20.0, h100, b1)
    assert at_a10 is None
    no_base = "no base receipt at this scope (device_kind=cuda, gpu_model=A10)"
    assert heads[2]["change_vs_base_reason"] == no_base
    looser = heads[0]["least_change_vs_base"]
    assert (looser["percent"], looser["base_receipt"]) == (-99.9, h200)
    said = (
        "estimate looser than the base's: least measured/predicted 0.000837x vs 0.81x on the"
        " base (-99.9 %)"
    )
    assert heads[0]["least_change_text"] == said
    text = run(capsys, *args).out
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    flat = " ".join(x.strip() for x in lines)
    assert f"+10 % vs base {b2[:12]} (0.9x)" in flat
    assert f"+20 % vs base {b1[:12]} (0.5x)" in flat
    assert no_base in flat and said in flat
    # Each row says its scope where the rows' scopes differ.
    assert "at device_kind=cuda, gpu_model=A10" in flat


def test_a_percentage_is_three_digits_signed_and_never_of_zero() -> None:
    from ledger.qualification.figures import Figure
    from ledger.trend import Point, Trend
    from ledger.trend.series import percent_text

    assert [percent_text(x) for x in (12.345, -99.91, 0.0, 1234.5, 0.012345)] == [
        "+12.3 %",
        "-99.9 %",
        "±0 %",
        "+1234 %",
        "+0.0123 %",
    ]

    def point(where: str, value: float) -> Point:
        fig = Figure("peak bytes", value, "bytes")
        return Point("c" * 40, where, "sha256:" + "0" * 64, "passed", "", fig)

    head = point("PR #1 head 1", 3 << 30)
    t = Trend("c", [point("base", 0), head], base_asked=1)
    change = t.change(head)
    assert change is not None and change.percent is None
    got = t.to_json()["points"][1]
    assert got["change_vs_base"]["percent"] is None
    assert got["change_vs_base_reason"] == "the base's peak bytes is 0: no percentage of 0"
    assert "no percentage of 0" in render_trend("r", 1, [t])

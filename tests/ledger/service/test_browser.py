"""The reviewer's pages in a real headless Chromium (Debian's `chromium` and
`chromium-driver`, driven by Selenium) on a ledger this test builds (a
force-pushed PR, a dispute, a memory snapshot): every page renders with no
console error and no serious axe-core violation, the PR matrix equals `status
--json` for the same PR, and the memory plot goes to docs/screenshots/ (the
other screenshots come from the real H200 receipts: test_reviewer_view.py)."""

from __future__ import annotations

import hashlib
import json
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import git
import pytest

from ledger.evidence.keys import KeyDir
from ledger.remote import client
from ledger.service.run import Running, start
from tests.conftest import commit_file
from tests.ledger.helpers import run
from tests.ledger.service.browser import axe_violations, browser, require_browser

SHOTS = Path(__file__).resolve().parents[3] / "docs" / "screenshots"
require_browser()

from selenium.webdriver.common.by import By  # noqa: E402

PLAN = """
[[claims]]
name = "admission.no-oom-after-admit"
check = "admission"
cleanup = false

[[claims]]
name = "determinism.bitwise"
check = "determinism"
cleanup = false
"""


def _snapshot() -> bytes:
    """A memory snapshot of the shape torch.cuda.memory._snapshot() returns."""
    frames = [{"filename": "train.py", "line": 41, "name": "forward"}]
    trace = [
        {"action": "segment_alloc", "addr": 0, "size": 8 << 20, "time_us": 0},
        {"action": "alloc", "addr": 1, "size": 3 << 20, "time_us": 10, "frames": frames},
        {"action": "alloc", "addr": 2, "size": 4 << 20, "time_us": 20, "frames": frames},
        {"action": "free_completed", "addr": 1, "size": 3 << 20, "time_us": 30},
        {"action": "free_completed", "addr": 2, "size": 4 << 20, "time_us": 40},
    ]
    return pickle.dumps({"segments": [], "device_traces": [trace]})


def _attest(capsys: pytest.CaptureFixture[str], r: git.Repo, *args: str) -> str:
    res = run(capsys, "attest", "--repo", str(r.working_tree_dir), "--key", "h200", *args)
    assert res.code == 0, res.err
    return res.out.strip()


@pytest.fixture
def site(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Iterator[tuple[Running, git.Repo, dict[str, str]]]:
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    monkeypatch.setenv("LEDGER_DB", db)
    for args in (("init",), ("keys", "new", "h200", "--role", "runner")):
        assert run(capsys, *args).code == 0
    assert run(capsys, "keys", "new", "alice", "--role", "reviewer").code == 0
    r = git.Repo.init(tmp_path / "up", initial_branch="main")
    commit_file(r, "model/planner.py", "budget = 1\n", "base")
    commit_file(r, "qualification.toml", PLAN, "plan")
    head1 = commit_file(r, "model/planner.py", "budget = 2\n", "pr v1")
    r.git.update_ref("refs/pull/7/head", head1)
    old = _attest(
        capsys,
        r,
        "--pr",
        "7",
        "--offline",
        "--claim",
        "admission.no-oom-after-admit",
        "--outcome",
        "passed",
    )
    # Force-push: the PR head moves to a commit that does not descend from the old one.
    r.git.reset("--hard", "HEAD~1")
    head2 = commit_file(r, "model/planner.py", "budget = 3\n", "pr v2")
    r.git.update_ref("refs/pull/7/head", head2)
    snap = tmp_path / "observer-snapshot.pickle"
    snap.write_bytes(_snapshot())
    shapes = [
        {
            "shape": f"b{b}xs128",
            "phase": p,
            "run": "first",
            "predicted_bytes": b * 1000,
            "measured_bytes": b * 900,
        }
        for p in ("forward", "forward_backward")
        for b in (1, 2, 4)
    ]
    meas = tmp_path / "m.json"
    meas.write_text(json.dumps({"max_measured_over_predicted": 0.9, "shapes": shapes}))
    new = _attest(
        capsys,
        r,
        "--pr",
        "7",
        "--offline",
        "--claim",
        "admission.no-oom-after-admit",
        "--outcome",
        "passed",
        "--measurements",
        str(meas),
        "--artifact",
        str(snap),
    )
    failed = _attest(
        capsys,
        r,
        "--pr",
        "7",
        "--offline",
        "--claim",
        "determinism.bitwise",
        "--outcome",
        "failed",
        "--reason",
        "logits differ at step 3",
    )
    rv = run(capsys, "review", failed, "--dispute", "--note", "flaky host", "--key", "alice")
    assert rv.code == 0, rv.err
    srv = start(db, KeyDir(key_dir), mirrors=[Path(str(r.working_tree_dir))])
    try:
        yield srv, r, {"old": old, "new": new, "failed": failed}
    finally:
        srv.stop()


def test_pages_render_and_agree_with_status(
    site: tuple[Running, git.Repo, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    srv, r, ids = site
    res = run(
        capsys, "status", "--repo", str(r.working_tree_dir), "--pr", "7", "--offline", "--json"
    )
    cli = json.loads(res.out)
    # The repository as the ledger names it (a remote-less one: by its root commit).
    q = urlencode({"repo": cli["subject"]["repo"], "pr": 7})
    assert json.loads(json.dumps(client._get(srv.url, f"/v1/status?{q}"))) == cli
    digest = hashlib.sha256(_snapshot()).hexdigest()
    SHOTS.mkdir(parents=True, exist_ok=True)
    b = browser(1280, 2400)
    try:
        pages = {
            "index": "/",
            "pr": f"/pr?{q}",
            "receipt": f"/receipt/{ids['new']}",
            "memory": f"/artifact/sha256:{digest}/memory",
        }
        for name, path in pages.items():
            b.get(srv.url + path)
            assert b.find_element(By.TAG_NAME, "h1").text, name
            errors = [e for e in b.get_log("browser") if e["level"] == "SEVERE"]
            assert errors == [], (name, errors)
            assert axe_violations(b) == [], name
            if name == "memory":
                b.save_screenshot(str(SHOTS / f"{name}.png"))
            if name == "pr":
                cells = {
                    c.get_attribute("data-claim"): c.get_attribute("data-state")
                    for c in b.find_elements(By.CSS_SELECTOR, "td[data-claim]")
                }
                want = {row["claim"]: row["state"] for row in cli["verdict"]["claims"]}
                assert cells == want
                heads = b.find_elements(By.CSS_SELECTOR, "tr[data-head]")
                assert [h.get_attribute("data-state") for h in heads] == ["stale", "current"]
                assert "force-push" in heads[1].text
                # The dispute, with the reviewer's name and note.
                [dispute] = b.find_elements(By.CSS_SELECTOR, "tr[data-state=disputed]")
                assert "alice" in dispute.text and "flaky host" in dispute.text
                review_page = dispute.find_element(By.TAG_NAME, "a").get_attribute("href")
                assert cli["verdict"]["headline"] in b.find_element(By.TAG_NAME, "h2").text
            if name == "receipt":
                assert len(b.find_elements(By.CSS_SELECTOR, "svg.chart")) == 2
                short = ids["new"].removeprefix("sha256:")[:12]
                assert f"ledger verify {short}.bundle.json --trust ledger.pub.pem" in b.page_source
                assert b.find_element(By.LINK_TEXT, "memory over time")
                assert b.find_element(By.PARTIAL_LINK_TEXT, "Back to PR #7")
            if name == "memory":
                assert "7.00 MiB" in b.find_element(By.CSS_SELECTOR, "[data-state=peak]").text
                assert "train.py:41 forward" in b.page_source
        # A review's own page: its verdict, note, reviewer and the receipt reviewed.
        b.get(review_page)
        main = b.find_element(By.TAG_NAME, "main").text
        assert "dispute" in main and "flaky host" in main and "alice" in main
        assert b.find_element(By.CSS_SELECTOR, f"a[href='/receipt/{ids['failed']}']")
        assert axe_violations(b) == []
        # Nothing was fetched from anywhere but the ledger itself.
        hosts = b.execute_script(
            "return performance.getEntriesByType('resource').map(e => new URL(e.name).host)"
        )
        assert set(hosts) <= {srv.url.removeprefix("http://")}
    finally:
        b.quit()


def _real_scope() -> dict[str, Any]:
    """The scope of a real H200 receipt (evidence/h200-run1): every facet, 64-hex digests."""
    import base64

    path = sorted((SHOTS.parents[1] / "evidence" / "h200-run1" / "bundles").glob("*.json"))[0]
    env = json.loads(json.loads(path.read_text())["entry"]["body"])
    scope: dict[str, Any] = json.loads(base64.b64decode(env["payload"]))["predicate"]["scope"]
    return scope


def test_eight_claims_at_a_real_scope_fit_1280(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Eight claims, each required at the H200 scope, each with a receipt carrying a
    real receipt's whole environment: the PR page stays inside 1280 px with one
    column for the one required scope."""
    scope = _real_scope()
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    monkeypatch.setenv("LEDGER_DB", db)
    for args in (("init",), ("keys", "new", "h200", "--role", "runner")):
        assert run(capsys, *args).code == 0
    claims = [f"family{i}.check-with-a-long-descriptive-name-{i}" for i in range(8)]
    plan = "".join(
        f'[[claims]]\nname = "{c}"\ncheck = "admission"\ncleanup = false\n'
        'scope = { device_kind = "cuda", gpu_model = "NVIDIA H200" }\n'
        for c in claims
    )
    r = git.Repo.init(tmp_path / "up", initial_branch="main")
    commit_file(r, "qualification.toml", plan, "plan")
    head = commit_file(r, "model.py", "x = 1\n", "pr")
    r.git.update_ref("refs/pull/8/head", head)
    facets = [a for k, v in scope.items() for a in ("--scope", f"{k}={v}")]
    for i, c in enumerate(claims):
        outcome = ("--outcome", "passed") if i % 3 else ("--outcome", "failed", "--reason", "OOM")
        _attest(capsys, r, "--pr", "8", "--offline", "--claim", c, *outcome, *facets)
    srv = start(db, KeyDir(key_dir), mirrors=[Path(str(r.working_tree_dir))])
    b = browser()
    try:
        repo = json.loads(
            run(
                capsys,
                "status",
                "--repo",
                str(r.working_tree_dir),
                "--pr",
                "8",
                "--offline",
                "--json",
            ).out
        )["subject"]["repo"]
        b.get(f"{srv.url}/pr?{urlencode({'repo': repo, 'pr': 8})}")
        cells = b.find_elements(By.CSS_SELECTOR, "td[data-claim]")
        assert len(cells) == 8
        assert len(b.find_elements(By.CSS_SELECTOR, "th.scope")) == 1
        assert int(b.execute_script("return document.documentElement.scrollWidth")) <= 1280
        assert axe_violations(b) == []
    finally:
        b.quit()
        srv.stop()

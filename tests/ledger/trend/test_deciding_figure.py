"""One deciding figure per receipt, printed one way on every surface: an admission
failed for looseness leads with its least measured/predicted against the plan's bound
(not its worst) on `ledger show`, the receipt page, the blocker's trend link and the
trend it opens (the bound drawn); a failed 24-view regression's trend link opens its
repeat difference's series, not a peak-memory trend. A real git repository, a real
SQLite ledger and server; receipts attested as another harness would."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import git
import httpx
import pytest

from ledger.qualification.deciding import deciding_of, figure_by_key
from ledger.service.run import Running, start
from tests.conftest import commit_file
from tests.ledger.helpers import run

LOOSE, VIEWS = "admission.loose", "regression.24view"
PLAN = f"""
[[claims]]
name = "{LOOSE}"
check = "admission"
cleanup = false

[[claims]]
name = "{VIEWS}"
check = "regression-24view"
cleanup = false
"""
SAID = "least measured/predicted 0.0147x < bound 0.25x"
HTML = {"Accept": "text/html"}


def _shape(shape: str, ratio: float) -> dict[str, Any]:
    predicted = 1 << 30
    return {
        "shape": shape,
        "phase": "forward",
        "admitted": True,
        "counterexample": False,
        "predicted_bytes": predicted,
        "measured_bytes": int(predicted * ratio),
        "measured_over_predicted": ratio,
        "run": "r1",
    }


ADMISSION = {
    "shapes": [_shape("1x16", 0.0147), _shape("2x16", 0.0188)],
    "max_measured_over_predicted": 0.0188,
    "min_measured_over_predicted": 0.0147,
    "process_peak_bytes": 490 << 20,
}
REGRESSION = {
    "views": 24,
    "seq": 16,
    "outputs": [{"name": "logits", "max_abs_diff": 0.03, "elements_differing": 5, "elements": 96}],
    "process_peak_bytes": 488 << 20,
}


def _attest(
    capsys: pytest.CaptureFixture[str],
    r: git.Repo,
    tmp: Path,
    claim: str,
    m: dict[str, Any],
    *args: str,
) -> str:
    path = tmp / f"m{len(list(tmp.glob('m*.json')))}.json"
    path.write_text(json.dumps(m))
    res = run(
        capsys,
        "attest",
        "--repo",
        str(r.working_tree_dir),
        "--key",
        "gpu",
        "--offline",
        "--claim",
        claim,
        "--measurements",
        str(path),
        "--scope",
        "device_kind=cuda",
        *args,
    )
    assert res.code == 0, res.err
    return res.out.strip()


@pytest.fixture
def site(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[tuple[Running, str, dict[str, str]]]:
    db = f"sqlite:///{tmp_path / 'l.db'}"
    monkeypatch.setenv("LEDGER_DB", db)
    monkeypatch.setenv("LEDGER_KEYS", str(tmp_path / "keys"))
    for args in (("init",), ("keys", "new", "gpu", "--role", "runner")):
        assert run(capsys, *args).code == 0
    r = git.Repo.init(tmp_path / "up", initial_branch="main")
    commit_file(r, "qualification.toml", PLAN, "plan")
    r.git.checkout("-b", "feature")
    head = commit_file(r, "model.py", "x = 1\n", "pr head")
    r.git.update_ref("refs/pull/4/head", head)
    failed = ("--pr", "4", "--outcome", "failed")
    ids = {
        LOOSE: _attest(
            capsys,
            r,
            tmp_path,
            LOOSE,
            ADMISSION,
            *failed,
            "--param",
            "min_measured_over_predicted=0.25",
            "--reason",
            "too loose: least measured/predicted 0.0147 < bound min_measured_over_predicted 0.25",
        ),
        VIEWS: _attest(
            capsys,
            r,
            tmp_path,
            VIEWS,
            REGRESSION,
            *failed,
            "--param",
            "pooled_atol=0",
            "--reason",
            "logits differ between two runs",
        ),
    }
    r.git.checkout("main")
    st = run(
        capsys, "status", "--repo", str(r.working_tree_dir), "--pr", "4", "--offline", "--json"
    )
    repo = json.loads(st.out)["subject"]["repo"]
    srv = start(db, None, mirrors=[Path(str(r.working_tree_dir))])
    try:
        yield srv, repo, ids
    finally:
        srv.stop()


def _text(page: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def _link(page: str, claim: str) -> tuple[str, str, str]:
    """The blocker's trend link: its address, its figure key and its words."""
    m = re.search(
        rf'<a href="([^"]+)" data-trend="{re.escape(claim)}" data-figure="([^"]+)">([^<]+)</a>',
        page,
    )
    assert m is not None, page
    return html.unescape(m.group(1)), m.group(2), html.unescape(m.group(3))


def test_admission_names_one_deciding_figure_on_every_surface(
    site: tuple[Running, str, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    srv, repo, ids = site
    # The terminal: what the check found leads with the deciding figure and its bound.
    shown = " ".join(run(capsys, "show", ids[LOOSE]).out.split())
    assert "Least measured/predicted 0.0147x < bound 0.25x at shape 1x16" in shown, shown
    assert not re.search(r"found\s+Worst", shown)
    assert f"decided by {SAID}" in shown
    # The receipt page: the same sentence, the finding past its bound.
    page = httpx.get(f"{srv.url}/receipt/{ids[LOOSE]}", headers=HTML).text
    found = page.split('<h2 id="found-h">', 1)[1]
    assert "Least measured/predicted 0.0147x < bound 0.25x at shape 1x16" in _text(found)
    assert 'data-state="counterexample"' in found.split("</div>", 1)[0]
    # What it means says which figure decided it, the same words.
    means = page.split('<p class="meaning">', 1)[1].split("</p>", 1)[0]
    assert f'data-figure="least-ratio" data-past="true">{SAID}</em>' in html.unescape(means)
    # The PR page's blocker link names it, and opens that figure's series.
    pr = httpx.get(f"{srv.url}/pr", params={"repo": repo, "pr": 4}, headers=HTML).text
    url, key, words = _link(pr, LOOSE)
    assert key == "least-ratio" and SAID in words
    trend = httpx.get(f"{srv.url}{url}", headers=HTML).text
    assert "least measured/predicted across the base" in _text(trend)
    svg = trend.split("<svg", 1)[1].split("</svg>", 1)[0]
    assert re.findall(r'class="value"[^>]*>([^<]+)<', svg) == ["0.0147x"]
    assert 'data-bound="0.25"' in svg and "bound 0.25" in svg
    assert "Judged against its bound 0.25x" in _text(trend)


def test_a_failed_24_view_regressions_trend_link_opens_its_own_figure(
    site: tuple[Running, str, dict[str, str]],
) -> None:
    srv, repo, _ = site
    pr = httpx.get(f"{srv.url}/pr", params={"repo": repo, "pr": 4}, headers=HTML).text
    url, key, words = _link(pr, VIEWS)
    assert key == "repeat-difference"
    assert "worst repeat difference 0.03 > bound 0" in words
    trend = _text(httpx.get(f"{srv.url}{url}", headers=HTML).text)
    assert "worst repeat difference across the base" in trend
    assert "peak" not in trend.split("across the base")[0] and "MiB" not in trend


def test_a_receipt_whose_measurements_name_their_deciding_figure_is_read_as_it_says() -> None:
    p = {
        "check": {"name": "command", "version": "1", "parameters": {}},
        "measurements": {
            "deciding": {
                "key": "tokens-per-second",
                "name": "tokens per second",
                "value": 812.0,
                "bound": 1000,
                "unit": "number",
                "direction": "min",
            },
            "process_peak_bytes": 3 << 30,
        },
    }
    d = deciding_of(p)
    assert d is not None and d.key == "tokens-per-second" and d.past is True
    assert d.text == "tokens per second 812 < bound 1000"
    # Its trend follows that figure; the peak stays a series of its own.
    assert figure_by_key(p, "tokens-per-second") == d.figure
    peak = figure_by_key(p, "peak-bytes")
    assert peak is not None and peak.text == "3.00 GiB"

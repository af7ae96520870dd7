"""`ledger import junit` reads JUnit XML as pytest means it; the XML comes from real
pytest runs made here (xfail, strict xpass, a platform skip, parametrised ids)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import git
import pytest

from tests.ledger.helpers import run
from tests.ledger.importers.test_import import _import, ready  # noqa: F401  (fixture)

SUITE = """\
import sys

import pytest


def test_sum():
    assert sum([1, 2]) == 3


@pytest.mark.xfail(reason="known rounding bug")
def test_known_bug():
    assert 0.1 + 0.2 == 0.3


@pytest.mark.xfail(reason="fixed upstream?", strict=True)
def test_fixed_upstream():
    assert True


@pytest.mark.skipif(sys.platform != "plan9", reason="only on plan9")
def test_platform_only():
    pass


@pytest.mark.parametrize("shape", ["1-2", "3"])
def test_shape(shape):
    assert shape
"""


@pytest.fixture(scope="module")
def xml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """JUnit XML of a real pytest run over SUITE."""
    d = tmp_path_factory.mktemp("suite")
    (d / "test_suite.py").write_text(SUITE)
    out = d / "junit.xml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "test_suite.py",
            f"--junitxml={out}",
        ],
        cwd=d,
        capture_output=True,
        check=False,
    )
    assert out.is_file()
    return out


def test_an_xfail_is_a_pass_and_a_strict_xpass_a_failure(
    ready: git.Repo,  # noqa: F811
    xml: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    xfail, xpass = _import(
        capsys, ready, "junit", xml, "suite.one=*known_bug", "suite.numerics=*fixed_upstream"
    )
    assert xfail["outcome"] == "passed", xfail["reason"]
    assert xfail["measurements"]["xfailed"][0]["message"] == "known rounding bug"
    assert xpass["outcome"] == "failed" and "XPASS(strict)" in xpass["reason"]


def test_a_platform_skip_does_not_block_a_pass_unless_the_plan_says_so(
    ready: git.Repo,  # noqa: F811
    xml: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    [lenient] = _import(capsys, ready, "junit", xml, "suite.one=*platform_only*")
    # Only the skipped test selected: nothing ran, so nothing is shown.
    assert lenient["outcome"] == "inconclusive" and "none ran" in lenient["reason"]
    [some] = _import(capsys, ready, "junit", xml, "suite.memory=test_suite::test_[sp]*")
    assert some["outcome"] == "passed" and some["measurements"]["skipped_count"] == 1
    assert some["measurements"]["not_run"][0]["message"] == "only on plan9"
    # skips = "inconclusive" in the plan: any skipped test keeps it from passing.
    [strict] = _import(capsys, ready, "junit", xml, "suite.strict=test_suite::test_[sp]*")
    assert strict["outcome"] == "inconclusive"


def test_ledger_run_and_import_agree_on_the_same_suite(
    ready: git.Repo,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    suite = SUITE.replace("strict=True", "strict=False")
    d = tmp_path / "agree"
    d.mkdir()
    (d / "test_suite.py").write_text(suite)
    report = d / "junit.xml"
    r = run(
        capsys,
        "run",
        "--claim",
        "suite.cmd",
        "--unplanned",
        "--rev",
        "main",
        "--repo",
        str(ready.working_tree_dir),
        "--key",
        "runner",
        # The suite lives outside the repository, where a sandbox would (rightly) hide
        # it: this compares pytest's meaning through run and import; the sandbox around
        # `ledger run` has tests of its own (test_sandbox_attack.py).
        "--sandbox",
        "none",
        "--",
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        str(d / "test_suite.py"),
        f"--junitxml={report}",
    )
    assert r.code == 0, r.err
    [p] = _import(capsys, ready, "junit", report, "suite.all")
    assert p["outcome"] == "passed", p["reason"]


def test_an_exact_pytest_id_with_brackets_selects_that_test(
    ready: git.Repo,  # noqa: F811
    xml: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # fnmatch would read [1-2] as a character class and select nothing.
    [by_node] = _import(capsys, ready, "junit", xml, "suite.one=test_suite.py::test_shape[1-2]")
    assert by_node["outcome"] == "passed"
    m = by_node["measurements"]
    assert m["selected_by"] == "exact" and m["tests"] == 1
    [by_junit] = _import(capsys, ready, "junit", xml, "suite.one=test_suite::test_shape[3]")
    assert by_junit["measurements"]["selected_by"] == "exact"
    [by_pattern] = _import(capsys, ready, "junit", xml, "suite.one=*test_shape*")
    assert by_pattern["measurements"]["selected_by"] == "pattern"
    assert by_pattern["measurements"]["tests"] == 2


def test_a_selection_of_nothing_is_refused_and_nothing_signed(
    ready: git.Repo,  # noqa: F811
    xml: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    repo = str(ready.working_tree_dir)
    r = run(
        capsys,
        "import",
        "junit",
        str(xml),
        "--claim",
        "suite.all",
        "--also",
        "suite.one=*no_such_test*",
        "--rev",
        "main",
        "--repo",
        repo,
        "--key",
        "runner",
    )
    assert r.code == 1 and "selects no test" in r.err and r.out == ""
    h = run(capsys, "history", "--rev", "main", "--repo", repo, "--json")
    assert json.loads(h.out)["entries"] == []


def test_a_malformed_time_does_not_break_the_import(tmp_path: Path) -> None:
    from ledger.identity.revision import Revision
    from ledger.importers import Context
    from ledger.importers.junit import read

    f = tmp_path / "j.xml"
    f.write_text(
        '<testsuite><testcase classname="m" name="a" time="soon"/>'
        '<testcase classname="m" name="b" time="nan"/></testsuite>'
    )
    ctx = Context(Revision(repo="r", commit="a" * 40, tree="b" * 40))
    found = read(f, [("c", "*")], ctx)["c"]
    assert found.outcome == "passed" and found.measurements["time_s"] == 0.0


DIFF = """\
def test_dicts():
    assert {"a": 1, "b": [1, 2, 3], "c": "x" * 30} == {"a": 2, "b": [1, 2, 4], "c": "y" * 30}
"""


def test_a_failure_reads_in_one_line_its_diff_in_the_measurements(
    ready: git.Repo,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """pytest's assertion diff is many lines: the reason and the import line keep
    the first, the measurements the whole detail."""
    (tmp_path / "test_diff.py").write_text(DIFF)
    out = tmp_path / "diff.xml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "test_diff.py",
            f"--junitxml={out}",
        ],
        cwd=tmp_path,
        capture_output=True,
        check=False,
    )
    repo = str(ready.working_tree_dir)
    r = run(
        capsys,
        *("import", "junit", str(out), "--claim", "suite.one=*", "--rev", "main"),
        *("--repo", repo, "--key", "runner"),
    )
    assert r.code == 1, r.err
    [line] = r.err.splitlines()
    assert line.startswith("suite.one: failed (imported from junit): 1 of 1 tests failed")
    shown = json.loads(run(capsys, "show", r.out.strip(), "--json").out)
    p = shown["statement"]["predicate"]
    assert "\n" not in p["reason"]
    [cx] = p["measurements"]["counterexamples"]
    assert "\n" in cx["detail"] and "Differing items" in cx["detail"]

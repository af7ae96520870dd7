"""`ledger verify` read without click (`ledger.cli.fast`) against click itself.

A command line the fast reader accepts must mean to click exactly what it
means to the reader; everything else goes through click. And either way the
command prints and exits alike.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
import git
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.cli import fast
from ledger.cli.read import verify as verify_command
from tests.ledger.helpers import Run, run

HERE = Path(__file__).parents[1]
FOLDER = str(HERE)
A_FILE = str(HERE / "helpers.py")


def _options(flags: bool) -> list[str]:
    return [
        o
        for p in verify_command.params
        if isinstance(p, click.Option) and p.is_flag == flags
        for o in p.opts
    ]


# The command's own options, as click declares them: an option added to `verify` is in
# the vocabulary at once, and the fast reader must then read it as click does.
OPTIONS = _options(flags=False)
"""The options that take a value."""
FLAGS = _options(flags=True)
WORDS = [
    *OPTIONS,
    *FLAGS,
    "--json=1",
    "--trust=" + A_FILE,
    "--trust=",
    "--repo=a=b",
    "--checkpoint=" + FOLDER,
    "--unknown",
    "--",
    "-",
    "-h",
    "--help",
    "-x",
    "",
    "b.json",
    "sha256:abc",
    A_FILE,
    FOLDER,
    "/nonexistent/x.pem",
    "verify",
]


def click_params(args: list[str]) -> dict[str, object] | None:
    """What click reads from `ledger verify ARGS`, or None where it refuses them."""
    try:
        with verify_command.make_context("verify", list(args)) as ctx:
            return dict(ctx.params)
    except (click.exceptions.ClickException, click.exceptions.Exit):
        return None


GOOD_VALUES = [A_FILE, "/nonexistent/x.pem", "a=b", "x", "sha256:abc", "https://x/y"]
BAD_VALUES = [FOLDER, "-x", "--json", ""]


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    """Mostly well-formed: a target and options, as `--opt value`, `--opt=value` or
    `--json`, in any order; now and then a bad value, a repeat or a stray word."""
    units: list[list[str]] = [[draw(st.sampled_from(["b.json", A_FILE, "sha256:abc", "x"]))]]
    opts = draw(st.permutations([*OPTIONS, *FLAGS, "--trust"]))[: draw(st.integers(0, 6))]
    if draw(st.integers(0, 4)) == 0:
        opts.append(draw(st.sampled_from([*OPTIONS, *FLAGS])))
    for opt in opts:
        good = st.sampled_from(GOOD_VALUES) | st.text(min_size=1, max_size=4).filter(
            lambda t: not t.startswith("-")
        )
        value = draw(good if draw(st.integers(0, 5)) else st.sampled_from(BAD_VALUES))
        if opt in FLAGS:
            units.append([opt if draw(st.integers(0, 5)) else f"{opt}={value}"])
        elif draw(st.booleans()):
            units.append([f"{opt}={value}"])
        else:
            units.append([opt, value])
    if draw(st.integers(0, 2)) == 0:
        units.append([draw(st.sampled_from(WORDS) | st.text(max_size=4))])
    return [word for unit in draw(st.permutations(units)) for word in unit]


CLI_CHECKS = settings(
    max_examples=600,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


@CLI_CHECKS
@given(words=command_lines() | st.lists(st.sampled_from(WORDS) | st.text(max_size=4), max_size=7))
def test_what_the_fast_reader_accepts_click_reads_the_same(words: list[str]) -> None:
    request = fast.verify_request(["verify", *words])
    if request is None:
        return  # click reads it, as it always did
    assert click_params(words) == request._asdict(), words


@pytest.mark.parametrize(
    "words",
    [
        ["b.json", "--trust", A_FILE],
        ["b.json", "--trust", A_FILE, "--trust", A_FILE, "--json"],
        ["--json", "--trust=" + A_FILE, "b.json", "--repo", "https://x/y", "--commit", "abc1234"],
        ["b.json", "--claim", "c", "--signer", "runner", "--checkpoint", "/nonexistent/cp"],
        ["b.json", "--repo=https://x/y?a=b", "--trust=" + A_FILE],
        ["sha256:abc", "--db", "sqlite:///l.db"],
        ["sha256:abc", "--server", "http://127.0.0.1:9", "--trust", A_FILE],
    ],
)
def test_plain_verify_command_lines_start_without_click(words: list[str]) -> None:
    """The forms a reviewer types are taken by the fast reader (so start-up stays
    fast), and click reads them the same."""
    request = fast.verify_request(["verify", *words])
    assert request is not None
    assert click_params(words) == request._asdict()


@pytest.mark.parametrize(
    "words",
    [
        [],
        ["--help"],
        ["b.json", "-h"],
        ["b.json", "c.json"],
        ["b.json", "--trust"],
        ["b.json", "--trust", "--json"],
        ["b.json", "--json", "--json"],
        ["b.json", "--repo", "a", "--repo", "b"],
        ["b.json", "--trust", FOLDER],
        ["b.json", "--checkpoint=" + FOLDER],
        ["b.json", "--", "--trust"],
        ["", "--trust", A_FILE],
    ],
)
def test_anything_else_goes_through_click(words: list[str]) -> None:
    assert fast.verify_request(["verify", *words]) is None
    assert fast.verify_request(["status", *words]) is None


def test_an_unreadable_trust_file_goes_through_click(tmp_path: Path) -> None:
    pem = tmp_path / "locked.pem"
    pem.write_text("x")
    pem.chmod(0)
    if os.access(pem, os.R_OK):
        pytest.skip("this user reads any file")
    assert fast.verify_request(["verify", "b.json", "--trust", str(pem)]) is None


# --- the same output and exit code either way ----------------------------------------------


def both(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str) -> Run:
    """`ledger ARGS` through the fast reader, then through click; the two must agree."""
    assert fast.verify_request(list(args)) is not None
    quick = run(capsys, *args)
    with monkeypatch.context() as m:
        m.setattr(fast, "verify_request", lambda args: None)
        slow = run(capsys, *args)
    assert quick == slow
    return quick


def test_verify_prints_and_exits_alike_either_way(
    tmp_path: Path,
    key_dir: Path,
    repo: git.Repo,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db = ("--db", f"sqlite:///{tmp_path / 'l.db'}")
    assert run(capsys, "init", *db).code == 0
    assert run(capsys, "keys", "new", "r", "--role", "runner", *db).code == 0
    rid = run(
        capsys,
        "attest",
        "--unplanned",
        "--claim",
        "c",
        "--rev",
        "HEAD",
        "--repo",
        str(repo.working_tree_dir),
        "--outcome",
        "passed",
        "--key",
        "r",
        *db,
    ).out.strip()
    bundle = tmp_path / "b.json"
    assert run(capsys, "export", rid, "-o", str(bundle), *db).code == 0
    trust = ("--trust", str(key_dir / "ledger.pem"))
    tampered = tmp_path / "t.json"
    tampered.write_bytes(bundle.read_bytes().replace(b'"index":', b'"index": ', 1))
    stranger = tmp_path / "stranger.pem"
    stranger.write_bytes((key_dir / "r.pem").read_bytes().replace(b"A", b"B", 1))

    ok = both(capsys, monkeypatch, "verify", str(bundle), *trust)
    assert ok.code == 0 and ok.out.startswith(f"verified {rid}\n")
    doc = json.loads(both(capsys, monkeypatch, "verify", str(bundle), *trust, "--json").out)
    assert doc["verified"] is True
    wrong = both(capsys, monkeypatch, "verify", str(bundle), *trust, "--claim", "other")
    assert wrong.code == 1 and "claim is c, expected other" in wrong.err
    assert both(capsys, monkeypatch, "verify", str(bundle)).code == 2
    assert both(capsys, monkeypatch, "verify", str(tampered), *trust).code == 1
    assert both(capsys, monkeypatch, "verify", str(tampered), *trust, "--json").code == 1
    assert both(capsys, monkeypatch, "verify", str(bundle), "--trust", str(stranger)).code in (1, 2)
    assert both(capsys, monkeypatch, "verify", str(tmp_path / "none.json"), *trust).code == 2
    assert both(capsys, monkeypatch, "verify", rid, *db).code == 0

    def interrupted(raw: bytes, anchors: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("ledger.verify.verify_bundle", interrupted)
    stopped = both(capsys, monkeypatch, "verify", str(bundle), *trust)
    assert (stopped.code, stopped.err) == (130, "\nledger: aborted\n")

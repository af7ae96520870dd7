"""The one reader of what a sandboxed process wrote: beneath its folder, one component
at a time, never through a link; regular files with one link on the folder's device
within the limit, nothing else read (and a FIFO never blocks)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ledger.outputs.beneath import Folder, Refused
from ledger.outputs.declared import declare
from ledger.outputs.match import match
from runners.harness.child import read_result

SYMLINK = "a symbolic link (not followed)"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A folder a process wrote, with a secret beside it (outside)."""
    (tmp_path / "secret.pem").write_text("PRIVATE")
    d = tmp_path / "out"
    (d / "sub").mkdir(parents=True)
    (d / "ok.txt").write_text("fine")
    (d / ".hidden").write_text("h")
    (d / "sub" / "deep.txt").write_text("deep")
    (d / "link.txt").symlink_to(tmp_path / "secret.pem")
    (d / "away").symlink_to(tmp_path)
    os.mkfifo(d / "pipe.txt")
    (d / "a.bin").write_text("x")
    os.link(d / "a.bin", d / "b.bin")
    return d


def _refused(f: Folder, rel: str, limit: int = 100) -> str:
    with pytest.raises(Refused) as e:
        f.read(rel, limit)
    return f"{e.value.path}: {e.value.why}"


def test_only_regular_single_link_files_within_the_limit_are_read(tree: Path) -> None:
    with Folder(tree) as f:
        assert f.read("ok.txt", 100) == b"fine" and f.read("sub/deep.txt", 4) == b"deep"
        assert _refused(f, "link.txt") == f"link.txt: {SYMLINK}"
        assert _refused(f, "away/secret.pem") == f"away: {SYMLINK}"
        assert _refused(f, "pipe.txt") == "pipe.txt: a FIFO"  # and it did not block
        assert _refused(f, "b.bin") == "b.bin: a hard link (2 links)"
        assert _refused(f, "sub/deep.txt", 3) == "sub/deep.txt: 4 bytes, over the 3-byte limit"
        assert _refused(f, "sub") == "sub: a directory"
        assert _refused(f, "ok.txt/x") == "ok.txt: not a directory"
        with pytest.raises(FileNotFoundError):
            f.read("none.txt", 100)
        for bad in ("../secret.pem", "/etc/passwd", "sub/../ok.txt", ""):
            with pytest.raises(ValueError):
                f.read(bad, 100)


def test_a_folder_on_another_device_is_not_entered() -> None:
    with Folder(Path("/")) as f:
        assert _refused(f, "proc/version") == "proc: on another device than its folder"


def test_a_glob_matches_as_glob_does_but_names_what_it_will_not_take(tree: Path) -> None:
    with Folder(tree) as f:
        m = match(f, "*")
        assert m.files == ["a.bin", "b.bin", "ok.txt"]  # b.bin is refused when read
        assert {r.path: r.why for r in m.refused} == {
            "away": SYMLINK,
            "link.txt": SYMLINK,
            "pipe.txt": "a FIFO",
        }
        assert match(f, ".*").files == [".hidden"]
        assert match(f, "**/*.txt").files == ["ok.txt", "sub/deep.txt"]
        assert match(f, "**").files == ["a.bin", "b.bin", "ok.txt", "sub/deep.txt"]
        assert [(r.path, r.why) for r in match(f, "sub").refused] == [("sub", "a directory")]
        assert [(r.path, r.why) for r in match(f, "away/*.pem").refused] == [("away", SYMLINK)]
        assert match(f, "none/*").files == [] and match(f, "none/*").refused == []


def test_remove_before_a_run_never_goes_through_a_link(tree: Path, tmp_path: Path) -> None:
    declare("away/secret.pem", tree).remove()
    assert (tmp_path / "secret.pem").read_text() == "PRIVATE"
    declare("ok.txt", tree).remove()
    assert not (tree / "ok.txt").exists()


def test_an_absolute_declaration_is_read_beneath_its_nearest_real_folder(
    tree: Path, tmp_path: Path
) -> None:
    d = declare(str(tree / "away" / "*.pem"), None)
    assert d.folder == tree and str(d.rel) == "away/*.pem"
    assert declare(str(tree / "new" / "r.json"), None).folder == tree
    assert declare(str(tree / "sub" / "r.json"), None).folder == tree / "sub"


def test_a_claim_result_is_read_only_as_a_regular_file(tree: Path) -> None:
    (tree / "result0.json").write_text(json.dumps([{"outcome": "passed"}]))
    assert read_result(tree / "result0.json") == [{"outcome": "passed"}]
    os.link(tree / "result0.json", tree / "result1.json")
    assert read_result(tree / "result1.json") is None
    os.mkfifo(tree / "result2.json")
    assert read_result(tree / "result2.json") is None
    (tree / "result3.json").symlink_to(tree / "ok.txt")
    assert read_result(tree / "result3.json") is None

"""The launcher's folders have explicit modes and it follows no link.

Under an umask of 027 the folders the launcher made on the way to the interpreter
were 0750, so no sandbox started at all, and the refusal named no cause. A link in
a bound folder the sandbox's uid cannot list (a checkout at mode 0700) was opened
with ``O_PATH`` and followed: the file it named was bound in, whatever folder held
it. And an interpreter the sandbox's uid cannot read is named, with the fix.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.sandbox import LAUNCHER, find_bwrap, resolve
from ledger.sandbox.launcher import REFUSED

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or (find_bwrap() is None and os.environ.get("CI") != "true"),
    reason="needs root (the launcher's covers are root's) and bubblewrap",
)


@pytest.fixture
def umask_027() -> Iterator[None]:
    old = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(old)


def test_under_an_umask_of_027_the_sandbox_still_starts(tmp_path: Path, umask_027: None) -> None:
    box = resolve("auto")
    scratch = tmp_path / "s"
    scratch.mkdir()
    argv, env = box.launch(box.policy(scratch=scratch), [sys.executable, "-c", "print('ran')"], {})
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == "ran\n", done.stderr
    [proof] = box.proofs.values()
    assert proof.ok, proof.summary


@pytest.fixture
def host_folder() -> Iterator[Path]:
    """A folder of the host's that every uid may traverse (not under the test's
    folders, which the launcher covers on the way to a bound path)."""
    folder = Path(tempfile.mkdtemp(prefix="ledger-host-", dir="/var/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_link_in_a_bound_folder_the_uid_cannot_list_is_not_followed(
    tmp_path: Path, host_folder: Path
) -> None:
    private = host_folder / "private"
    private.mkdir(mode=0o700)
    secret = private / "secret.txt"
    secret.write_text("host secret")
    secret.chmod(0o644)  # readable, but only through a folder the uid cannot enter
    checkout = tmp_path / "checkout"
    checkout.mkdir(mode=0o700)
    (checkout / "plain.txt").write_text("plain")
    (checkout / "plain.txt").chmod(0o644)
    (checkout / "link").symlink_to(secret)
    box = resolve("auto")
    scratch = tmp_path / "s"
    scratch.mkdir()
    code = (
        "import os, sys; p = sys.argv[1]\n"
        "print(os.path.islink(p + '/link'), open(p + '/plain.txt').read())\n"
        "try:\n    print(open(p + '/link').read())\nexcept OSError as e:\n    print(e.strerror)\n"
    )
    policy = box.policy(scratch=scratch, read_only=[checkout])
    argv, env = box.launch(policy, [sys.executable, "-c", code, str(checkout)], {})
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # A link stays a link, resolved in the sandbox's own view: the host file is not there.
    assert done.stdout.splitlines() == ["True plain", "No such file or directory"], done.stdout


def test_an_interpreter_the_uid_cannot_read_is_named_with_the_fix(
    tmp_path: Path, umask_027: None
) -> None:
    from ledger.sandbox.launcher import unreadable

    lib = tmp_path / "lib" / "python3"
    (lib / "encodings").mkdir(parents=True)
    need = str(lib / "encodings")
    assert unreadable([need], 65534, 65534) is not None
    # Reached as every bound path is (the test's folders above it are root's, 0700).
    spec = {"uid": 65534, "gid": 65534, "route": "userns", "reach": [need], "needs": [need]}
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(LAUNCHER), json.dumps(spec), "--", "/bin/true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == REFUSED
    [line] = done.stderr.splitlines()
    assert f"cannot read {need} (mode 0750, owner uid 0)" in line, line
    assert f"chmod -R o+rX {need}" in line and "umask of 027" in line
    os.chmod(need, 0o755)
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(LAUNCHER), json.dumps(spec), "--", "/bin/true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr

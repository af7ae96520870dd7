"""`ledger verify` on a test-result export names what it was given (an unsigned
test-result Statement, not a bundle) and the receipt to verify instead, not only
"not a bundle"; it still refuses it (exit 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ledger.helpers import run
from tests.ledger.transparency.test_bundle import Exported, exported, ledger  # noqa: F401


def test_verify_on_a_test_result_export_names_it(
    exported: Exported,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "receipt.test-result.json"
    ledger(
        capsys,
        "export",
        exported.id,
        "--format",
        "test-result",
        "-o",
        str(out),
        "--db",
        exported.db,
    )
    r = run(capsys, "verify", str(out), "--trust", str(exported.keys / "ledger.pem"))
    assert r.code == 1, (r.out, r.err)
    said = " ".join(r.err.split())
    assert "test-result" in said and "unsigned" in said
    assert exported.id in said  # the receipt it stands for, to verify instead
    assert f"ledger export {exported.id}" in said

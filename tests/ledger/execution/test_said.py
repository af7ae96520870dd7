"""A finished claim says one line: an observer-off control's three receipts say
what each is (the inner check with the observer on, with it off, and the
comparison that is the claim's verdict)."""

from __future__ import annotations

from ledger.execution.said import Said, finished_line


def test_one_receipt_one_line() -> None:
    line = finished_line(
        "[2/6]",
        "cleanup.all-released",
        "cleanup",
        [
            Said(
                "sha256:" + "a" * 64,
                "cleanup",
                "off",
                "failed",
                "delta 167772160 > tolerance 67108864",
            )
        ],
        "9.4 s",
    )
    assert line == (
        "[2/6] cleanup.all-released failed: delta 160 MiB > tolerance 64.0 MiB (9.4 s)"
        " -> sha256:aaaaaaaaaaaa"
    )


def test_a_controls_three_receipts_are_explained_in_one_line() -> None:
    recs = [
        Said("sha256:" + "1" * 64, "regression-24view", "on", "passed", None),
        Said("sha256:" + "2" * 64, "regression-24view", "off", "passed", None),
        Said("sha256:" + "3" * 64, "observer-off-control", "off", "passed", None),
    ]
    line = finished_line("[5/6]", "observer.off-control", "observer-off-control", recs, "9.4 s")
    assert "\n" not in line and line.count("passed") == 4
    assert line.startswith("[5/6] observer.off-control passed (9.4 s), 3 receipts: ")
    assert "regression-24view with the observer on passed -> sha256:111111111111" in line
    assert "regression-24view with the observer off passed -> sha256:222222222222" in line
    assert "the comparison (observer-off-control, the claim's verdict) passed" in line

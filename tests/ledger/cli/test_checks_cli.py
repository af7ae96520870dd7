"""`ledger checks`: a plan's author learns every check and parameter from the CLI."""

from __future__ import annotations

import json

import pytest

from tests.ledger.helpers import run


def test_checks_json_lists_every_check_with_typed_documented_parameters(
    capsys: pytest.CaptureFixture[str],
) -> None:
    r = run(capsys, "checks", "--json")
    assert r.code == 0, r.err
    catalog = {c["name"]: c for c in json.loads(r.out)}
    assert {"admission", "regression-24view", "full-prefix-backward", "cleanup"} <= set(catalog)
    adm = {p["name"]: p for p in catalog["admission"]["params"]}
    assert adm["batches"]["type"] == "list[int]" and adm["batches"]["default"] == [1, 2, 4]
    for check in catalog.values():
        assert check["summary"] and check["version"]
        for p in check["params"]:
            assert p["doc"], f"{check['name']}.{p['name']} has no docstring"


def test_checks_text_names_each_parameter(capsys: pytest.CaptureFixture[str]) -> None:
    r = run(capsys, "checks")
    assert r.code == 0
    assert "admission (version" in r.out and "    batches: list[int] = [1, 2, 4]" in r.out


def test_checks_lists_the_import_checks_and_command(capsys: pytest.CaptureFixture[str]) -> None:
    r = run(capsys, "checks", "--json")
    assert r.code == 0, r.err
    catalog = {c["name"]: c for c in json.loads(r.out)}
    names = ("import-junit", "import-in-toto", "import-admission-events", "command")
    assert set(names) <= set(catalog)
    skips = {p["name"]: p for p in catalog["import-junit"]["params"]}["skips"]
    assert skips["default"] == "allowed" and "inconclusive" in skips["doc"]
    text = run(capsys, "checks").out
    assert all(f"{n} (version" in text for n in names)


def test_qualify_leaves_imported_and_command_claims_to_import_and_run() -> None:
    from ledger.evidence.errors import InputError
    from ledger.execution.claims import asked_claims
    from ledger.qualification.plan import parse_plan
    from runners.api import check_names, params_error

    plan = parse_plan(
        "[[claims]]\nname = 'cleanup.all'\ncheck = 'cleanup'\n"
        "[[claims]]\nname = 'suite.junit'\ncheck = 'import-junit'\n"
        "[[claims]]\nname = 'art.spool'\ncheck = 'import-admission-events'\n"
        "[[claims]]\nname = 'suite.cmd'\ncheck = 'command'\n"
    )
    asked, skipped = asked_claims(plan, [], check_names(), params_error)
    assert [c.name for c in asked] == ["cleanup.all"]
    assert [c.name for c, _ in skipped] == ["suite.junit", "art.spool", "suite.cmd"]
    with pytest.raises(InputError, match="recorded by `ledger import`"):
        asked_claims(plan, ["suite.junit"], check_names(), params_error)


def test_checks_text_fits_80_columns_in_plain_quotes(capsys: pytest.CaptureFixture[str]) -> None:
    """Off a terminal the catalog wraps at 80 columns, docstring literals in plain quotes."""
    text = run(capsys, "checks").out
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "``" not in text and "'observer_off'" in text

"""A ready adapter's `estimator` and `calibration` in a plan: `"builtin"` or
`module:function`, positive calibration sizes; anything else is refused in one line
naming the claim and the field, and `ledger qualify` writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import git
import pytest

from ledger.evidence.errors import InputError
from ledger.qualification.plan import parse_plan
from tests.ledger.helpers import run

PLAN = """workload = "{workload}"
[workload_params]
factory = "t:b"
loss = "t:l"
batch = "t:b"
{extra}
[[claims]]
name = "adm"
check = "admission"

[profiles.big]
workload_params = {{ {profile} }}
"""


ADAPTER = "runners.adapt.library:module"


def _plan(extra: str = "", profile: str = "", workload: str = ADAPTER) -> str:
    return PLAN.format(workload=workload, extra=extra, profile=profile)


@pytest.mark.parametrize(
    "extra",
    [
        "",
        'estimator = "builtin"',
        'estimator = "team.mem:estimate"',
        "calibration = { max_tokens = 64, validate_tokens = 512 }",
        'estimator = "team.mem:estimate"\nbuiltin_beside = true',
        'estimator = "team.mem:estimate"\nbuiltin_beside = false',
        "builtin_beside = false",
    ],
)
def test_what_an_adapter_plan_may_name(extra: str) -> None:
    parse_plan(_plan(extra))


@pytest.mark.parametrize(
    ("extra", "profile", "said"),
    [
        (
            'estimator = "bogus"',
            "",
            'workload_params.estimator: must be "builtin" or "module:function", got \'bogus\'',
        ),
        ("estimator = 3", "", "workload_params.estimator: must be"),
        ("calibration = { max_tokens = 0 }", "", "calibration.max_tokens: must be a positive"),
        ("calibration = { tokens = 8 }", "", "calibration.tokens: unknown"),
        ("calibration = 5", "", "workload_params.calibration: must be a table"),
        ("", 'estimator = "x"', "profiles.big.workload_params.estimator: must be"),
        (
            'estimator = "team.mem:estimate"\nbuiltin_beside = "yes"',
            "",
            "workload_params.builtin_beside: must be true or false, got 'yes'",
        ),
        (
            "builtin_beside = true",
            "",
            "workload_params.builtin_beside: needs a team's estimator",
        ),
        (
            'estimator = "builtin"\nbuiltin_beside = true',
            "",
            "workload_params.builtin_beside: needs a team's estimator",
        ),
    ],
)
def test_a_bad_estimator_or_calibration_is_refused_naming_the_field(
    extra: str, profile: str, said: str
) -> None:
    with pytest.raises(InputError, match="claims\\[0\\] \\(adm\\): ") as e:
        parse_plan(_plan(extra, profile))
    assert said in str(e.value) and "\n" not in str(e.value)


def test_a_team_workload_keeps_its_own_parameters() -> None:
    # Only a ready adapter reads `estimator`: a team's workload may mean anything by it.
    parse_plan(_plan("estimator = 3", workload="team.wl:make"))


def test_qualify_refuses_the_plan_and_writes_nothing(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    repo = tmp_path / "r"
    repo.mkdir()
    (repo / "qualification.toml").write_text(_plan('estimator = "bogus"'))
    g = git.Repo.init(repo)
    g.index.add(["qualification.toml"])
    actor = git.Actor("T", "t@example.invalid")
    g.index.commit("plan", author=actor, committer=actor)
    r = run(capsys, "qualify", "--rev", "HEAD", "--repo", str(repo), "--device", "cpu")
    assert r.code in (1, 2), r.err
    assert "workload_params.estimator: must be" in r.err and "Traceback" not in r.err
    history = run(capsys, "history", "--rev", "HEAD", "--repo", str(repo), "--json")
    assert history.code != 0 or json.loads(history.out)["entries"] == []

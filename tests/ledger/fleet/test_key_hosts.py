"""Each key speaks only for its hosts: a registered runner key that signs receipts
naming another host's GPUs with bad health is refused at ingest (here and through
`ledger serve`), and the fleet counts no such receipt, so it quarantines no other
host's device; a signed name that would act on a terminal is refused; a key of an
earlier release speaks for the hosts it recorded from; an operator adds and removes
hosts in the log; a failure the baseline attributed to the pull request is never the
device's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.evidence.errors import RefusedError, UsageError
from ledger.evidence.keys import KeyDir, LocalKey, public_pem
from ledger.fleet.report import fleet_report, store_predicates
from ledger.remote import client
from ledger.service.auth import new_token
from ledger.service.run import start
from ledger.store.store import Store
from ledger.transparency.audit import audit
from ledger.write.ingest import record, register_key
from ledger.write.recorders import recorders
from tests.ledger.factories import COMMIT, TREE, dump, envelope
from tests.ledger.helpers import run

GPU_V = "GPU-11111111-0000-0000-0000-000000000000"
"""The victim host's GPU."""
GPU_W = "GPU-22222222-0000-0000-0000-000000000000"
"""Another victim's GPU, recorded there but declared nowhere."""
GPU_X = "GPU-33333333-0000-0000-0000-000000000000"
GPU_Y = "GPU-44444444-0000-0000-0000-000000000000"
"""GPUs no host declares or recorded yet."""
BASE, HEAD = "b" * 40, "c" * 40


def _sick(uuid: str) -> str:
    return f"infra fault: row remap pending on {uuid}"


def _receipt(
    key: LocalKey,
    host: str,
    uuids: list[str],
    *,
    outcome: str = "failed",
    health: str = "",
    commit: str = COMMIT,
    pr: int | None = None,
    base: str | None = None,
    at: int = 0,
) -> bytes:
    """A receipt of ``host``'s ``uuids``; ``at`` (seconds) makes it another one."""
    src: dict[str, Any] = {"repo": "example", "commit": commit, "tree": TREE, "dirty": False}
    if pr is not None:
        src |= {"pr": pr, "base": base}
    return envelope(
        key,
        outcome=outcome,
        reason=None if outcome == "passed" else "it failed",
        source=src,
        runner={
            "host": host,
            "gpu_uuids": uuids,
            "started": f"2026-11-30T00:00:{at:02d}Z",
            "finished": f"2026-11-30T00:01:{at:02d}Z",
            "ledger_version": "0.1.0",
            "environment": {"gpu_health": health or f"clean ({len(uuids)} device(s))"},
        },
    )


@pytest.fixture
def led(tmp_path: Path, key_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> Path:
    """A ledger with the victim's runner key (its host and GPU declared), a second
    victim's (no GPU declared) and mallory's, each registered for its own host."""
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    monkeypatch.setenv("LEDGER_CACHE", str(tmp_path / "cache"))
    assert run(capsys, "init").code == 0
    for args in (
        ("victim", "--host", "victim-host", "--gpu", GPU_V),
        ("victim2", "--host", "victim2-host"),
        ("mallory", "--host", "mallory-host"),
    ):
        r = run(capsys, "keys", "new", args[0], "--role", "runner", *args[1:])
        assert r.code == 0, r.err
    return tmp_path


def _record(capsys: Any, tmp: Path, raw: bytes) -> Any:
    f = tmp / "e.json"
    f.write_bytes(raw)
    return run(capsys, "record", str(f))


def _store(tmp: Path) -> Store:
    return Store.open(f"sqlite:///{tmp / 'l.db'}")


def test_a_key_naming_another_hosts_gpus_is_refused_at_ingest_and_quarantines_nothing(
    led: Path, key_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = KeyDir(key_dir)
    victim, victim2, mallory = (keys.load(n) for n in ("victim", "victim2", "mallory"))
    for k, host, gpu in ((victim, "victim-host", GPU_V), (victim2, "victim2-host", GPU_W)):
        for i in range(2):
            assert _record(capsys, led, _receipt(k, host, [gpu], outcome="passed", at=i)).code == 0
    store = _store(led)
    before = dump(store)
    # The attack: mallory's key signs receipts naming the victim's host and GPU, sick.
    r = _record(capsys, led, _receipt(mallory, "victim-host", [GPU_V], health=_sick(GPU_V)))
    assert r.code == 1, r.out
    assert r.err.count("\n") == 1
    assert "runner.host 'victim-host': key mallory speaks for mallory-host, not this host" in r.err
    # Its own host, but the victim's declared GPU: refused too.
    r = _record(capsys, led, _receipt(mallory, "mallory-host", [GPU_V], health=_sick(GPU_V)))
    assert r.code == 1 and "is declared on host 'victim-host'" in r.err
    # A GPU the victim's own key did not declare is refused as well.
    r = _record(capsys, led, _receipt(victim, "victim-host", [GPU_W]))
    assert r.code == 1 and "is not among the GPUs key victim declares" in r.err
    # Written nowhere: the ledger is byte for byte what it was.
    assert dump(store) == before
    # A GPU nobody declared, recorded first on victim2's host: mallory's receipts naming
    # it from mallory's own host are refused as well.
    for i in range(3):
        raw = _receipt(mallory, "mallory-host", [GPU_W], health=_sick(GPU_W), at=i)
        r = _record(capsys, led, raw)
        assert r.code == 1 and r.err.count("\n") == 1, r.err
        assert f"'{GPU_W}' was first recorded on host 'victim2-host', not 'mallory-host'" in r.err
    assert dump(store) == before
    r = run(capsys, "fleet", "--json", "--quarantine-above", "0.05")
    doc = json.loads(r.out)
    assert doc["quarantined"] == {}, doc
    dev = {d["uuid"]: d for d in doc["devices"]}
    assert dev[GPU_W]["runs"] == 2 and dev[GPU_W]["device_faults"] == 0
    assert dev[GPU_W]["hosts"] == ["victim2-host"]
    assert "QUARANTINED" not in run(capsys, "fleet", "--quarantine-above", "0.05").out
    store.engine.dispose()


def test_a_gpu_no_host_declares_belongs_to_the_first_host_that_recorded_it(
    led: Path, key_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = KeyDir(key_dir)
    victim2, mallory = keys.load("victim2"), keys.load("mallory")
    store = _store(led)
    # Mallory records first on a GPU no host recorded yet: it is mallory-host's from now.
    assert (
        _record(capsys, led, _receipt(mallory, "mallory-host", [GPU_X], outcome="passed")).code == 0
    )
    before = dump(store)
    r = _record(capsys, led, _receipt(victim2, "victim2-host", [GPU_X], health=_sick(GPU_X)))
    assert r.code == 1 and r.err.count("\n") == 1
    assert "was first recorded on host 'mallory-host', not 'victim2-host'" in r.err
    # In one batch: the first receipt to name a new GPU binds it, the second is refused
    # and neither is written.
    both = [
        _receipt(victim2, "victim2-host", [GPU_Y], outcome="passed"),
        _receipt(mallory, "mallory-host", [GPU_Y], health=_sick(GPU_Y)),
    ]
    with pytest.raises(
        RefusedError, match=r"input 2: runner.gpu_uuids: .* first recorded on host 'victim2-host'"
    ):
        record(store, both)
    assert dump(store) == before
    # Declared on victim2-host by its operator, the GPU is victim2-host's: its receipts
    # are taken, mallory's refused, and the fleet counts it there.
    r = run(
        capsys, "keys", "host", "add", "victim2", "victim2-host", "--gpu", GPU_X, "--reason", "r"
    )
    assert r.code == 0, r.err
    assert (
        _record(capsys, led, _receipt(victim2, "victim2-host", [GPU_X], outcome="passed")).code == 0
    )
    r = _record(capsys, led, _receipt(mallory, "mallory-host", [GPU_X], health=_sick(GPU_X)))
    assert r.code == 1 and "is declared on host 'victim2-host'" in r.err
    dev = {d["uuid"]: d for d in json.loads(run(capsys, "fleet", "--json").out)["devices"]}
    assert dev[GPU_X]["hosts"] == ["victim2-host"] and dev[GPU_X]["runs"] == 1
    store.engine.dispose()


def test_the_poisoning_is_refused_through_the_server_and_its_fleet_stays_clean(
    led: Path, key_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    tokens = tmp_path / "tokens"
    admin = new_token("key-desk", tokens, ["keys"])
    gpu = new_token("gpu-host", tokens, ["runner", "read"])
    keys = KeyDir(key_dir)
    victim = keys.load("victim")
    srv = start(f"sqlite:///{led / 'l.db'}", keys, tokens=tokens)
    try:
        eve = keys.create("eve")
        pem = public_pem(eve.public)
        # Registered over HTTP, a runner key names its hosts.
        with pytest.raises(RefusedError, match="names the hosts it speaks for"):
            client.register_key(srv.url, "eve", "runner", pem, token=admin)
        with pytest.raises(RefusedError, match="not printable text"):
            client.register_key(
                srv.url, "eve", "runner", pem, token=admin, hosts={"eve\x1b[2J": []}
            )
        client.register_key(srv.url, "eve", "runner", pem, token=admin, hosts={"eve-host": []})
        listed = {k["name"]: k for k in client.fetch_keys(srv.url)}
        assert listed["eve"]["hosts"] == {"eve-host": []}
        assert listed["victim"]["hosts"] == {"victim-host": [GPU_V]}
        monkeypatch.setenv("LEDGER_TOKEN", gpu)
        for _ in range(2):
            client.post_envelopes(
                srv.url, [_receipt(victim, "victim-host", [GPU_V], outcome="passed")]
            )
        size = client.health(srv.url)["entries"]
        for raw in (
            _receipt(eve, "victim-host", [GPU_V], health=_sick(GPU_V)),
            _receipt(eve, "eve-host", [GPU_V], health=_sick(GPU_V)),
        ):
            with pytest.raises(RefusedError) as e:
                client.post_envelopes(srv.url, [raw, raw])
            assert "input 1: runner." in e.value.reason()
        assert client.health(srv.url)["entries"] == size
        doc = client.fetch_fleet(srv.url, 0.05, gpu)
        assert doc["quarantined"] == {}
        r = run(capsys, "fleet", "--server", srv.url, "--quarantine-above", "0.05")
        assert r.code == 0 and "QUARANTINED" not in r.out
        page = httpx.get(
            f"{srv.url}/fleet?quarantine_above=0.05",
            headers={"Accept": "text/html", "Authorization": f"Bearer {gpu}"},
        )
        assert page.status_code == 200 and "<strong>quarantined</strong>" not in page.text
        # The key desk moves eve to another host over HTTP (the keys role), in the log.
        moved = _receipt(eve, "eve-host-2", [], outcome="passed")
        with pytest.raises(RefusedError, match="speaks for eve-host, not this host"):
            client.post_envelopes(srv.url, [moved])
        with pytest.raises(UsageError, match="lacks the 'keys' role"):
            client.change_host(srv.url, "eve", "add", "eve-host-2", "moved", token=gpu)
        with pytest.raises(RefusedError, match="does not speak for"):
            client.change_host(srv.url, "eve", "remove", "nowhere", "r", token=admin)
        doc = client.change_host(srv.url, "eve", "add", "eve-host-2", "moved", token=admin)
        assert doc["hosts"] == {"eve-host": [], "eve-host-2": []}
        client.post_envelopes(srv.url, [moved])
        doc = client.change_host(srv.url, "eve", "remove", "eve-host", "retired", token=admin)
        assert doc["hosts"] == {"eve-host-2": []} and doc["hosts_source"] == "registered"
        [change, _] = [e.document for e in _store(led).entries(kinds=["hosts"])]
        assert (change["by"], change["reason"]) == ("key-desk", "moved")
    finally:
        srv.stop()


def test_a_signed_name_that_is_not_printable_is_refused_and_pages_escape_earlier_ones(
    led: Path,
    key_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    evil = "h\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2J"
    r = run(capsys, "keys", "new", "x", "--role", "runner", "--host", evil)
    assert r.code == 2 and "is not printable text" in r.err and "\x1b" not in r.err
    assert not (key_dir / "x.pem").exists()
    # A key of an earlier release (bound on its first use) signs the escape bytes.
    keys = KeyDir(key_dir)
    old = keys.create("old")
    store = _store(led)
    register_key(store, "old", "runner", old.public)
    before = dump(store)
    for raw, where in (
        (_receipt(old, evil, []), "runner.host"),
        (_receipt(old, "ok-host", ["GPU-1\x1b[31m"]), "runner.gpu_uuids"),
        (_receipt(old, "ok\u202ehost", []), "runner.host"),
    ):
        r = _record(capsys, led, raw)
        assert r.code == 1 and f"{where} " in r.err and "is not printable text" in r.err
        assert "\x1b" not in r.err and "\u202e" not in r.err
    assert dump(store) == before
    # Recorded by a release that did not check names: the /fleet page shows them escaped.
    import ledger.write.ingest as ingest

    monkeypatch.setattr(ingest, "check_names", lambda p: None)
    assert _record(capsys, led, _receipt(old, evil, [])).code == 0
    tokens = tmp_path / "tokens"
    reader = new_token("reader", tokens, ["read"])
    srv = start(f"sqlite:///{led / 'l.db'}", keys, tokens=tokens)
    try:
        page = httpx.get(
            f"{srv.url}/fleet",
            headers={"Accept": "text/html", "Authorization": f"Bearer {reader}"},
        ).text
    finally:
        srv.stop()
    assert "\x1b" not in page and "\x07" not in page
    assert "h\\x1b]52;c;cm0gLXJmIH4K\\x07\\x1b[2J" in page
    store.engine.dispose()


def test_a_key_registered_before_binding_speaks_for_the_hosts_it_recorded_from(
    led: Path, key_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = KeyDir(key_dir)
    old = keys.create("old")
    store = _store(led)
    # Registered as an earlier release did: its key entry names no hosts.
    register_key(store, "old", "runner", old.public)
    [entry] = [e for e in store.entries(kinds=["key"]) if e.document["name"] == "old"]
    assert "hosts" not in entry.document
    for i in range(2):
        assert _record(capsys, led, _receipt(old, "gpu-host", [], outcome="passed", at=i)).code == 0
    r = _record(capsys, led, _receipt(old, "other-host", []))
    assert r.code == 1
    assert "key old speaks for gpu-host (recorded before binding), not this host" in r.err
    shown = run(capsys, "keys", "list").out
    assert "hosts: gpu-host (recorded before binding)" in shown
    row = next(
        k for k in json.loads(run(capsys, "keys", "list", "--json").out) if k["name"] == "old"
    )
    assert row["hosts"] == {"gpu-host": []} and row["hosts_source"] == "recorded before binding"
    assert audit(store).ok
    store.engine.dispose()


@pytest.mark.parametrize("name", ["h200-health", "h200-fleet-qwen3", "cpu-trend"])
def test_a_frozen_earlier_ledger_keeps_its_fleet_and_shows_its_keys_hosts(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ledger.evidence.errors import Error
    from ledger.transparency.logged import standing

    src = Path(__file__).resolve().parents[3] / "evidence" / name / "ledger.db"
    db = tmp_path / "ledger.db"
    shutil.copy(src, db)
    store = Store.open(f"sqlite:///{db}")
    keys = store.keys()
    every = []
    for e in store.entries(kinds=["receipt"]):
        try:
            if standing(e, keys) is None:
                every.append(e.receipt.predicate.model_dump(mode="json"))
        except Error:
            continue
    # As the earlier release counted them: every standing receipt.
    report = fleet_report(store_predicates(store))
    assert report == fleet_report(every)
    # Ingest holds each GPU to the host the fleet counts it for.
    assert recorders(store).owner == {d["uuid"]: h for d in report["devices"] for h in d["hosts"]}
    rows = json.loads(run(capsys, "keys", "list", "--json", "--db", str(db)).out)
    runners = [r for r in rows if r["role"] == "runner"]
    assert runners and all(r["hosts_source"] == "recorded before binding" for r in runners)
    assert all(r["hosts"] for r in runners)
    assert "(recorded before binding)" in run(capsys, "keys", "list", "--db", str(db)).out
    store.engine.dispose()


def test_an_operator_adds_and_removes_a_host_in_the_log(
    led: Path, key_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = KeyDir(key_dir)
    victim = keys.load("victim")
    sick = _receipt(victim, "victim-host", [GPU_V], health=_sick(GPU_V))
    assert _record(capsys, led, sick).code == 0
    assert _record(capsys, led, _receipt(victim, "new-host", [])).code == 1
    r = run(capsys, "keys", "host", "add", "victim", "new-host", "--reason", "moved racks")
    assert r.code == 0 and "new-host" in r.out and "victim-host" in r.out
    assert _record(capsys, led, _receipt(victim, "new-host", [], outcome="passed")).code == 0
    r = run(capsys, "keys", "host", "remove", "victim", "victim-host", "--reason", "retired")
    assert r.code == 0, r.err
    r = _record(capsys, led, _receipt(victim, "victim-host", [GPU_V], outcome="passed"))
    assert r.code == 1 and "speaks for new-host, not this host" in r.err
    # Its receipts there, logged before, no longer count in the fleet.
    doc = json.loads(run(capsys, "fleet", "--json").out)
    assert [h["host"] for h in doc["hosts"]] == ["new-host"] and doc["devices"] == []
    # In the log, with the reason; the audit checks each change.
    store = _store(led)
    changes = [e.document for e in store.entries(kinds=["hosts"])]
    assert [(c["action"], c["host"], c["reason"]) for c in changes] == [
        ("add", "new-host", "moved racks"),
        ("remove", "victim-host", "retired"),
    ]
    assert audit(store).ok
    row = next(
        k for k in json.loads(run(capsys, "keys", "list", "--json").out) if k["name"] == "victim"
    )
    assert row["hosts"] == {"new-host": []} and row["hosts_source"] == "registered"
    # What an operator cannot do: remove a host the key does not speak for, bind a
    # reviewer key, a name that is not printable, a change without a reason.
    assert run(capsys, "keys", "new", "rev", "--role", "reviewer").code == 0
    for args, why in (
        (("remove", "victim", "victim-host", "--reason", "r"), "does not speak for"),
        (("add", "rev", "h", "--reason", "r"), "only runner keys speak for hosts"),
        (("add", "victim", "h\x1b[2J", "--reason", "r"), "is not printable text"),
        (("add", "victim", "h", "--reason", " "), "needs a --reason"),
    ):
        r = run(capsys, "keys", "host", *args)
        assert r.code == 2 and why in r.err, r.err
    assert len(list(store.entries(kinds=["hosts"]))) == 2
    store.engine.dispose()


def test_a_failure_the_baseline_attributed_to_the_pull_request_is_never_the_devices(
    led: Path, key_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = KeyDir(key_dir)
    victim = keys.load("victim")
    xid = f"fault: XID 13 (graphics engine exception) on {GPU_V}"
    store = _store(led)
    # The base passes on the GPU; two pull requests each fail there with an XID the
    # code can cause (under two pull requests it would count against the device).
    base = [
        _receipt(victim, "victim-host", [GPU_V], outcome="passed", commit=BASE),
        _receipt(victim, "victim-host", [GPU_V], outcome="passed", commit="d" * 40),
    ]
    heads = [
        _receipt(victim, "victim-host", [GPU_V], health=xid, commit=HEAD, pr=1, base=BASE),
        _receipt(victim, "victim-host", [GPU_V], health=xid, commit="e" * 40, pr=2, base="d" * 40),
    ]
    record(store, [*base, *heads])
    doc = fleet_report(store_predicates(store))
    [dev] = doc["devices"]
    assert (dev["runs"], dev["failures"], dev["device_faults"]) == (4, 0, 0)
    [host] = doc["hosts"]
    assert host["failures"] == 0 and host["device_faults"] == 0
    # The claim's: the code failed twice.
    assert doc["claims"][0]["failures"] == 2
    r = run(capsys, "fleet", "--json", "--quarantine-above", "0.05")
    assert json.loads(r.out)["quarantined"] == {}
    # Where the base fails there too, the failure is not the pull request's: it counts.
    record(store, [_receipt(victim, "victim-host", [GPU_V], health=xid, commit=BASE)])
    doc = fleet_report(store_predicates(store))
    assert doc["devices"][0]["failures"] == 2
    store.engine.dispose()

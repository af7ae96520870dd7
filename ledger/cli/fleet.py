"""`ledger fleet`: per GPU, host and claim, what the receipts say of the fleet."""

from __future__ import annotations

from typing import Any

import click

from ledger.cli._common import db_option, emit_json, json_option, open_reader, server_option


def _render(doc: dict[str, Any], above: float | None) -> str:
    from ledger.read.humanize import number
    from ledger.read.inert import inert

    def shown(x: object) -> str:
        # Host names, UUIDs and claim names as receipts signed them: an earlier
        # release took the host and UUIDs from the claim's own result, so a receipt
        # may carry control sequences there; they are shown escaped, never sent.
        return inert(str(x), newlines=False)

    def rate(x: float) -> str:
        return f"{number(100 * x)} %"

    cols = "runs  failed  infra  faults  fail>=  fault>="
    lines = []
    for title, rows, key in (
        ("per GPU", doc["devices"], "uuid"),
        ("per host", doc["hosts"], "host"),
        ("per claim", doc["claims"], "claim"),
    ):
        lines.append(f"{title}:")
        width = max([len(shown(r[key])) for r in rows] + [len(key)])
        lines.append(f"  {key:<{width}}  {cols}")
        for r in rows:
            mark = ""
            if key == "uuid" and r["uuid"] in doc.get("quarantined", {}):
                mark = "  QUARANTINED"
            lines.append(
                f"  {shown(r[key]):<{width}}  {r['runs']:>4}  {r['failures']:>6}"
                f"  {r['infra_errors']:>5}"
                f"  {r['health_faults']:>6}  {rate(r['failure_rate_lower']):>6}"
                f"  {rate(r['fault_rate_lower']):>7}{mark}"
            )
        if not rows:
            lines.append("  (none)")
    lines.append(
        "fail>= and fault>=: 95 % Wilson lower bounds of failures (failed or infra-error) "
        "and of device faults per claim run"
    )
    if above is not None:
        lines.append(
            f"quarantine: fault>= above {rate(above)}: "
            + (", ".join(map(shown, doc["quarantined"])) or "no device")
        )
    if "dcgm_diag_none" in doc:
        lines.append(f"DCGM diagnostic: nothing diagnosed: {doc['dcgm_diag_none']}")
    return "\n".join(lines) + "\n"


@click.command()
@db_option
@click.option(
    "--quarantine-above",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    help="Name the devices whose fault-rate lower bound exceeds this (a runner sets "
    "LEDGER_QUARANTINE_ABOVE to the same so that `qualify --gpus all` skips them).",
)
@click.option(
    "--diagnose",
    is_flag=True,
    help="First run `dcgmi diag -r 2` on each GPU of this host (minutes each) and print it.",
)
@server_option(
    "Ask a `ledger serve` at URL for its ledger's fleet instead of --db (a token with "
    "the read role: --token or $LEDGER_TOKEN)."
)
@click.option("--token", help="The server token (else $LEDGER_TOKEN); with --server.")
@json_option
def fleet(
    db: str | None,
    quarantine_above: float | None,
    diagnose: bool,
    server: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Flaky devices told from flaky claims: per GPU UUID, per host and per claim, the
    claims run, failures, infra errors, receipts whose GPU health showed a fault, and
    Wilson lower bounds of the failure and device-fault rates."""
    diag: dict[str, Any] = {}
    none: str | None = None
    if diagnose:
        import shutil

        from ledger.execution.devices import visible_gpus
        from ledger.fleet.dcgm import diagnose as run_diag

        devices = visible_gpus()
        # Said once, before anything: a per-device "not installed", or no line at all
        # without a GPU, read as if the devices had been looked at.
        if shutil.which("dcgmi") is None:
            none = "dcgmi is not installed on this host (not on PATH)"
        elif not devices:
            none = "no GPU is visible on this host"
        else:
            for d in devices:
                click.echo(f"dcgmi diag -r 2 on {d.label} ({d.uuid}) ...", err=True)
                diag[str(d.uuid)] = got = run_diag(d.index, level=2)
                click.echo(f"  {got['result']}", err=True)
        if none is not None:
            click.echo(f"ledger: --diagnose: {none}: nothing was diagnosed", err=True)
    reader = open_reader(db, server, token)
    try:
        doc = reader.fleet(quarantine_above)
    finally:
        reader.close()
    if diagnose:
        doc["dcgm_diag"] = diag
        if none is not None:
            doc["dcgm_diag_none"] = none
    if as_json:
        emit_json(doc)
    else:
        click.echo(_render(doc, quarantine_above), nl=False)

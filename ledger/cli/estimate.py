"""`ledger profile` and `ledger calibrate`: tooling for a workload's estimator."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import click

from ledger.cli._common import db_option, emit_json, json_option, open_store, rev_options
from ledger.evidence.errors import InputError, UsageError

__all__ = ["calibrate", "profile"]


def _param(pairs: Sequence[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--param wants KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw  # a bare word: a string
    return out


@click.command()
@click.option("--workload", "ref", required=True, metavar="MODULE:ATTR", help="Entry point.")
@click.option("--shape", required=True, metavar="BxS[,name=N]", help="e.g. 4x1024.")
@click.option(
    "--phase",
    type=click.Choice(["forward_nograd", "forward_backward"]),
    default="forward_backward",
    show_default=True,
)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option(
    "--repo",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    help="Directory the workload is imported from (default: here).",
)
@click.option(
    "--param", "params", multiple=True, metavar="K=V", help="Factory argument (JSON value)."
)
@click.option("--warm", is_flag=True, help="Run one unmeasured step first (a warm step).")
@click.option("--top", default=10, show_default=True, help="Rows per grouping.")
@click.option("--depth", type=int, help="Group module paths to this many components.")
@json_option
def profile(
    ref: str,
    shape: str,
    phase: str,
    device: str,
    repo: Path,
    params: Sequence[str],
    warm: bool,
    top: int,
    depth: int | None,
    as_json: bool,
) -> None:
    """Run one step under the live-tensor tracker and attribute its peak increment.

    Prints the measured increment beside the workload's estimate (and its terms;
    a workload without an estimator yet is profiled all the same, nothing predicted),
    the largest live tensors at the peak grouped by module path and by the op that
    made them, saved-for-backward against temporary bytes, and on CUDA the
    allocator's view (allocated, reserved, outside the pool).
    """
    try:
        from runners.profile.step import ProfileError, profile_step
        from runners.protocol import Shape
    except ImportError as e:
        raise UsageError(f"profile needs the runners extra (torch): {e}") from None
    try:
        parsed = Shape.parse(shape)
    except ValueError as e:
        raise InputError(str(e)) from None
    try:
        doc = profile_step(
            root=repo.resolve(),
            ref=ref,
            params=_param(params),
            shape=parsed,
            phase="forward_nograd" if phase == "forward_nograd" else "forward_backward",
            device=device,
            warm=warm,
            top=top,
            depth=depth,
        )
    except ProfileError as e:
        raise UsageError(str(e)) from None
    if as_json:
        emit_json(doc)
        return
    click.echo(_render_profile(doc), nl=False)


def _render_profile(doc: Mapping[str, object]) -> str:
    att = doc["attribution"]
    assert isinstance(att, dict)
    ratio = doc["measured_over_predicted"]
    lines = [
        f"{doc['workload']} {doc['phase']} {doc['shape']} on {doc['device']} "
        f"({'cold' if doc['cold'] else 'warm'})",
        f"measured increment {doc['measured_increment_bytes']:,} bytes; "
        + _predicted(doc["predicted_bytes"], ratio),
        f"at the peak: saved for backward {att['saved_for_backward_bytes']:,}, "
        f"temporary {att['temporary_bytes']:,} ({att['allocations']} allocations)",
    ]
    for title, key in (("by module", "by_module"), ("by op", "by_op")):
        lines.append(f"{title}:")
        lines += [f"  {n:>14,}  {name}" for name, n in att[key].items()]
    lines.append("largest live tensors at the peak:")
    for r in att["largest"]:
        tag = "saved" if r["saved_for_backward"] else "temp"
        lines.append(f"  {r['bytes']:>14,}  {tag:<5} {r['op']:<28} {r['module']}")
    terms = doc["estimate_terms"]
    assert isinstance(terms, dict)
    if doc["predicted_bytes"] is not None:
        lines.append("estimate terms: " + ", ".join(f"{k}={v:,}" for k, v in terms.items()))
    elif doc.get("no_estimator"):
        lines.append(f"no estimator: {doc['no_estimator']}")
    alloc = att.get("allocator")
    if isinstance(alloc, dict) and "before" in alloc:
        for when in ("before", "at_end_of_step", "after"):
            a = alloc[when]
            lines.append(
                f"allocator {when}: allocated {a['allocated_bytes']:,} (peak "
                f"{a['allocated_peak_bytes']:,}), reserved {a['reserved_bytes']:,}, "
                f"outside the pool {a['outside_pool_bytes']:,}"
            )
    return "\n".join(lines) + "\n"


def _predicted(predicted: object, ratio: object) -> str:
    """The workload's prediction beside the measured peak; a workload without an
    estimator yet (a ready adapter whose plan names none) predicts nothing, no ratio."""
    if not isinstance(predicted, int):
        return "no estimator: nothing predicted"
    shown = f" (measured/predicted {ratio:.3f})" if isinstance(ratio, float) else ""
    return f"predicted {predicted:,}{shown}"


@click.command()
@click.option("--claim", required=True, metavar="NAME", help="The admission claim.")
@rev_options
@db_option
@json_option
def calibrate(
    claim: str,
    pr: int | None,
    rev: str | None,
    base: str | None,
    offline: bool,
    repo: Path | None,
    db: str | None,
    as_json: bool,
) -> None:
    """Measured against predicted bytes from the claim's admission receipts.

    Per shape and phase: measured/predicted (min..max, cold), admitted steps over
    their prediction, over-refusals; then the worst ratio and the shapes with no
    measurement. Reports only: it fits no coefficient.
    """
    from ledger.identity import source
    from ledger.plans import governing
    from ledger.read.calibration import calibrate as report_of
    from ledger.read.calibration import render
    from ledger.read.evidence import load_evidence

    ident = governing.identify(source.open_repo(repo), rev=rev, pr=pr, offline=offline, base=base)
    receipts, _ = load_evidence(open_store(db), ident.revision, claims=[claim])
    pairs = [(r.id, r.predicate.model_dump(mode="json")) for r in receipts]
    doc = report_of(pairs)
    if not doc["receipts"]:
        raise InputError(
            f"no admission receipt of claim {claim!r} for {ident.revision.commit[:12]}"
        )
    if as_json:
        emit_json(doc)
    else:
        click.echo(render(doc), nl=False)

"""A posted status question stays readable by a server of the earlier release, which
refuses subject fields it does not know (`service/questions._identity`)."""

from __future__ import annotations

from ledger.identity.revision import DefinitionProof, Revision
from ledger.plans.governing import Identity
from ledger.read.question import Question

# The subject's fields as the 2026-12-05 release knew them, frozen.
EARLIER = {
    "repo",
    "commit",
    "tree",
    "package_digest",
    "pr",
    "package_paths",
    "parents",
    "base",
    "dirty",
    "package_parts",
}


def _rev(**extra: object) -> Revision:
    return Revision(repo="r", commit="a" * 40, tree="b" * 40, package_digest="c" * 64, **extra)  # type: ignore[arg-type]


def test_a_question_without_a_workload_definition_names_only_earlier_fields() -> None:
    q = Question.of(Identity(_rev(), None, ())).to_json()
    assert set(q["subject"]) == EARLIER


def test_a_checkouts_proof_never_travels_in_a_question() -> None:
    proof = DefinitionProof(commit="d" * 40, same=True)
    q = Question.of(Identity(_rev(definition_proofs=(proof,)), None, ())).to_json()
    assert "definition_proofs" not in q["subject"]
    q = Question.of(Identity(_rev(prior_package_digest="e" * 64), None, ())).to_json()
    assert q["subject"]["prior_package_digest"] == "e" * 64

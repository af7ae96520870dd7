"""Which flipped tokens the 24-view regression sets aside where the head cannot replay
the base's routing: only those whose base margin is within what the reference precision
moves it; and how the judged outputs lose them."""

from __future__ import annotations

import torch

from runners.adapt.routers import margin
from runners.checks import routing
from runners.checks.grad_arm import margins_of
from runners.checks.regression_base import _Kept
from runners.contract.result import Json


def test_the_margin_is_the_kth_less_the_next_probability() -> None:
    logits = torch.tensor([[2.0, 1.0, 1.0, -1.0], [0.0, 0.0, 0.0, 0.0]], dtype=torch.bfloat16)
    got = margin(logits, 2)
    assert got.dtype == torch.float32 and got.tolist() == [0.0, 0.0]
    p = torch.softmax(torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64), dim=-1)
    assert margin(torch.tensor([[3.0, 2.0, 1.0]], dtype=torch.float64), 1).item() == (
        torch.tensor(float(p[0] - p[1]), dtype=torch.float32).item()
    )


def test_only_flips_within_the_margin_floor_are_set_aside() -> None:
    base = {"gate": torch.tensor([[0, 1], [0, 1], [2, 3], [0, 2]])}
    # Token 0 agrees (order within the top k does not count); 1 and 2 flip; 3 agrees.
    head = {"gate": torch.tensor([[1, 0], [0, 2], [2, 1], [2, 0]])}
    margins = {"gate": torch.tensor([0.5, 0.0005, 0.3, 0.002])}
    reference = {"gate": torch.tensor([0.5, 0.001, 0.3, 0.002])}
    floors = routing.margin_floors(margins, reference)
    assert abs(floors["gate"] - 0.0005) < 1e-6
    aside, table = routing.benign_flips(head, base, margins, floors, 2.0)
    assert aside is not None and aside.tolist() == [False, True, False, False]
    assert table["tokens_differing"] == 2 and table["tokens_set_aside"] == 1
    assert table["tokens_differing_judged"] == 1 and table["share_set_aside"] == 0.25
    # Without the reference's margins there is no floor: every flip is judged.
    aside, table = routing.benign_flips(head, base, margins, {}, 2.0)
    assert aside is not None and not aside.any() and table["tokens_differing_judged"] == 2


def test_a_token_flipped_on_a_near_tie_and_on_a_wide_margin_is_judged() -> None:
    base = {"a": torch.tensor([[0], [0]]), "b": torch.tensor([[1], [1]])}
    head = {"a": torch.tensor([[1], [1]]), "b": torch.tensor([[1], [0]])}
    margins = {"a": torch.tensor([0.001, 0.001]), "b": torch.tensor([0.001, 0.4])}
    aside, table = routing.benign_flips(head, base, margins, {"a": 0.001, "b": 0.001}, 2.0)
    assert aside is not None and aside.tolist() == [True, False]
    assert table["tokens_differing_judged"] == 1


def test_the_judged_outputs_lose_the_tokens_and_views_set_aside() -> None:
    aside = torch.zeros(3 * 4, dtype=torch.bool)
    aside[5] = True  # view 1, token 1
    kept = _Kept(aside, views=3)
    got = kept.of(
        {
            "logits": torch.arange(3 * 4 * 2.0).reshape(3, 4, 2),
            "pooled_hidden": torch.arange(3 * 5.0).reshape(3, 5),
            "loss": torch.tensor(1.0),
            "token_nll": torch.arange(12.0),
            # As wide as a view is long: read as rows per view, the whole view set aside.
            "per_view": torch.arange(3 * 4.0).reshape(3, 4),
        }
    )
    assert got["token_nll"].tolist() == [x for x in range(12) if x != 5]
    assert got["per_view"].shape == (2, 4)
    assert got["logits"].shape == (11, 2) and 10.0 not in got["logits"]
    assert got["pooled_hidden"][:, 0].tolist() == [0.0, 10.0]
    assert "loss" not in got
    m: dict[str, Json] = {"base_routing": {"set_aside": {"tokens_set_aside": 1}}}
    kept.measured(m)
    assert m["base_routing"]["set_aside"] == {  # type: ignore[index]
        "tokens_set_aside": 1,
        "not_judged": ["loss"],
        "views_set_aside": 1,
    }


class _Declares:
    """A workload's routers the harness does not know: it offers their margins."""

    def declare_routing(self, on: bool) -> None:
        pass

    def router_margins(self) -> dict[str, torch.Tensor]:
        return {"moe.0": torch.tensor([0.25, 0.5], dtype=torch.bfloat16)}


def test_a_workload_that_offers_margins_has_them_saved() -> None:
    got = margins_of(_Declares(), None)
    assert got["moe.0"].dtype == torch.float32 and got["moe.0"].tolist() == [0.25, 0.5]
    assert margins_of(object(), None) == {}

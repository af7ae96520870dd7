"""How a claim's measured figure moved across a PR's heads and the base
branch's recent commits, read from the receipts alone (`ledger trend`, the PR
page's trend chart)."""

from __future__ import annotations

from ledger.trend.figures import Figure, figure_of
from ledger.trend.series import Point, Trend, trend

__all__ = ["Figure", "Point", "Trend", "figure_of", "trend"]

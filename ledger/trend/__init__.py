"""How a claim's measured figure moved across a PR's heads and the base
branch's recent commits, read from the receipts alone (`ledger trend`, the PR
page's trend chart). The figures it follows are the judge's own
(`ledger.qualification.figures`, `ledger.qualification.deciding`)."""

from __future__ import annotations

from ledger.trend.series import Point, Trend, trend

__all__ = ["Point", "Trend", "trend"]

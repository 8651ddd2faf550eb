"""Approximate on-demand list prices (`llm_pd_eks/data/prices.json`), one table for every reader.

The Grafana dashboard's cost panel (deployed by the program), the preview's cost figure and
`make size` all price nodes from this one file; it lives with the program because `pulumi up`
reads it too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PRICES_FILE = Path(__file__).resolve().parent / "data" / "prices.json"


@dataclass(frozen=True)
class PriceTable:
    regions: dict[str, dict[str, Any]]
    as_of: str
    source: str
    about: str
    currency: str = "USD"
    hours_per_month: float = 730.0


def load_prices(path: Path = PRICES_FILE) -> PriceTable:
    data = json.loads(Path(path).read_text())
    return PriceTable(
        regions=data["regions"],
        as_of=data["as_of"],
        source=data["source"],
        about=data["about"],
        currency=data.get("currency", "USD"),
        hours_per_month=float(data.get("hours_per_month", 730)),
    )

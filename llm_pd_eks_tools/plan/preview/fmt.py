"""How the preview writes numbers and text for people: one place, so the terminal report, summary.md
and diff.md cannot drift apart (they did: the diff printed KV bytes raw while the report used MiB).
"""

from __future__ import annotations

import json
from typing import Any, Optional


def money(x: Optional[float]) -> str:
    """`$1,234.56`; "n/a" when there is no figure."""
    return "n/a" if x is None else f"${x:,.2f}"


def signed_money(x: float) -> str:
    """A change of cost: `+$0.50`, `−$3.00` (a real minus sign, as in the diff's prose)."""
    return f"{'+' if x >= 0 else '−'}{money(abs(x))}"


def size(n: int) -> str:
    """Bytes in binary units: `448.00 MiB`."""
    for unit, step in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= step:
            return f"{n / step:.2f} {unit}"
    return f"{n} B"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


def md_cell(text: str) -> str:
    """Text safe inside a Markdown table cell (pipes escaped, newlines as <br>)."""
    return text.replace("|", "\\|").replace("\n", "<br>")


def short_value(value: Any, limit: int = 120) -> str:
    """A JSON value on one line, cut to `limit` characters (newlines shown as ⏎)."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    text = text.replace("\n", "⏎")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def resource_label(name: str, type_: str) -> str:
    return f"{name} ({type_})"


MOCK_PREFIX = "[mock: "


def mark_mock_values(value: Any, mock: set[str]) -> Any:
    """`value` with every string the mock runtime made up (an id, a fake output) as `[mock: ...]`.

    A real preview knows no ids before `up`; showing `network-vpc-id` bare would read as an AWS id.
    """
    if isinstance(value, dict):
        return {k: mark_mock_values(v, mock) for k, v in value.items()}
    if isinstance(value, list):
        return [mark_mock_values(v, mock) for v in value]
    if isinstance(value, str) and value in mock:
        return f"{MOCK_PREFIX}{value}]"
    return value

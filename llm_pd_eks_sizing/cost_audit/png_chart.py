"""A labelled horizontal bar chart as PNG bytes, drawn by matplotlib's Agg backend.

The same bars give the same bytes: the figure's size and dpi are fixed, matplotlib's default style
is used whatever a matplotlibrc says, and the PNG carries no `Software` text chunk (the matplotlib
version); Agg writes no timestamp (matplotlib docs, `Figure.savefig`, `metadata`: "for PNG, the
keys `Software` ... may be set to None to not write them").
"""

from __future__ import annotations

import io
from typing import Sequence

DPI = 100
ROW_PX, TOP_PX, PAD_PX = 34, 50, 16  # one bar per row, below the title


def bar_chart(title: str, bars: Sequence[tuple[str, float, str]], width: int = 900) -> bytes:
    """`bars` = (label, value, value text), one horizontal bar each, longest = the largest value.

    `width` is in pixels; the height grows with the bars (ROW_PX each, plus the title's TOP_PX).
    """
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    height = TOP_PX + ROW_PX * max(1, len(bars)) + PAD_PX
    with matplotlib.rc_context(matplotlib.rcParamsDefault):
        figure = Figure(figsize=(width / DPI, height / DPI), dpi=DPI, layout="constrained")
        FigureCanvasAgg(figure)
        axes = figure.add_subplot()
        axes.set_title(title, loc="left")
        labels = [label for label, _, _ in bars]
        values = [max(0.0, value) for _, value, _ in bars]
        colors = [f"C{i % 10}" for i in range(len(bars))]  # the default cycle: tab10
        rows = range(len(bars))
        axes.barh(list(rows), values, color=colors, height=0.7)
        for row, value, (_, _, shown) in zip(rows, values, bars):
            axes.text(value, row, f" {shown}", va="center")
        biggest = max(values, default=0.0) or 1.0
        axes.set_xlim(0, biggest * 1.2)  # room for the value text after the longest bar
        axes.set_ylim(len(bars) - 0.5 if bars else 0.5, -0.5)  # first bar on top
        axes.set_yticks(list(rows), labels)
        axes.xaxis.set_visible(False)
        for side in ("top", "right", "bottom"):
            axes.spines[side].set_visible(False)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()

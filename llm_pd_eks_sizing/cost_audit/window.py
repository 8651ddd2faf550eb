"""The audit's window, one for every source: Cost Explorer bills whole UTC days, Prometheus answers for
any span, so the two must be made to agree.

- `--since Nd`: **whole UTC days**, the N days before today's 00:00 UTC (today is still being billed).
  Cost Explorer and Prometheus both cover exactly those days.
- `--since Nh`: the N hours up to now. Cost Explorer's daily amounts are **prorated**: each day counts
  with the share of it inside the window, today's against the hours billed so far; the report says
  so. Cost Explorer's own data lags by up to a day (AWS, "Cost Explorer: data is refreshed at least
  once every 24 hours"), so the last hours are an estimate either way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from llm_pd_eks_tools.core.cli import Exit, ToolError

MAX_SINCE_DAYS = 90  # Cost Explorer's daily history at DAILY granularity is longer; 90 keeps queries small
DAY = timedelta(days=1)


@dataclass(frozen=True)
class Window:
    """[start, end) in UTC, and the moment the audit runs (what Cost Explorer has billed up to)."""

    since: str
    start: datetime
    end: datetime
    now: datetime
    whole_days: bool

    @property
    def hours(self) -> float:
        return (self.end - self.start).total_seconds() / 3600

    @property
    def promql_range(self) -> str:
        """The window as a PromQL range, evaluated at `end`."""
        return f"{round(self.hours)}h"

    def ce_period(self) -> tuple[date, date]:
        """Cost Explorer's TimePeriod: every day the window touches, End exclusive."""
        last = (self.end - timedelta(microseconds=1)).date()
        return self.start.date(), last + DAY

    def day_share(self, day: date) -> float:
        """The share of `day`'s Cost Explorer amount that lies inside the window (1 for whole days)."""
        day_start = datetime.combine(day, time(), tzinfo=UTC)
        billed_until = min(day_start + DAY, self.now)
        if billed_until <= day_start:
            return 0.0
        inside = min(self.end, billed_until) - max(self.start, day_start)
        return max(0.0, inside / (billed_until - day_start))

    def basis(self) -> str:
        """How the Cost Explorer figures relate to the window, for the report."""
        start, end = self.ce_period()
        if self.whole_days:
            return f"whole UTC days {start} to {end} (End exclusive), the same days in Prometheus"
        shares = ", ".join(f"{d} x{self.day_share(d):.3f}" for d in self.days())
        return f"prorated: the window's share of each billed day ({shares})"

    def days(self) -> list[date]:
        start, end = self.ce_period()
        return [start + timedelta(days=n) for n in range((end - start).days)]


def parse_since(text: str, now: datetime) -> Window:
    """`7d` (whole days before today) or `36h` (hours up to now)."""
    match = re.fullmatch(r"([0-9]{1,12})([hd])", text)
    if match is None or int(match.group(1)) == 0:
        raise ToolError(Exit.USAGE, f"--since {text!r}: give a window such as 7d or 36h")
    count, unit = int(match.group(1)), match.group(2)
    if count > MAX_SINCE_DAYS * (24 if unit == "h" else 1):  # before timedelta, which overflows on 9999999999d
        raise ToolError(Exit.USAGE, f"--since {text}: at most {MAX_SINCE_DAYS}d (Cost Explorer's daily history)")
    span = timedelta(hours=count) if unit == "h" else timedelta(days=count)
    if span > timedelta(days=MAX_SINCE_DAYS):
        raise ToolError(Exit.USAGE, f"--since {text}: at most {MAX_SINCE_DAYS}d (Cost Explorer's daily history)")
    if unit == "d":
        end = datetime.combine(now.astimezone(UTC).date(), time(), tzinfo=UTC)
        return Window(text, end - span, end, now, whole_days=True)
    return Window(text, now - span, now, now, whole_days=False)

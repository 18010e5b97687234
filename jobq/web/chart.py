"""The throughput chart: bars of tasks done and failed per minute, drawn as inline SVG by
the templates from the geometry computed here (no script draws it)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from jobq.web.queries import MINUTES


@dataclass(frozen=True)
class Bar:
    """One minute's bar: done stacked under failed, in the SVG's user units."""

    x: float
    done_y: float
    done_height: float
    failed_y: float
    failed_height: float
    label: str


@dataclass(frozen=True)
class Chart:
    """A chart's bars, oldest minute first, its size, and the largest minute's total."""

    bars: list[Bar]
    width: int
    height: int
    peak: int
    done: int
    failed: int


def chart(
    done: list[int], failed: list[int], now: datetime, *, width: int = 360, height: int = 60
) -> Chart:
    """The bars of ``done`` and ``failed`` (index i: the minute ending i minutes before
    ``now``), scaled so that the busiest minute fills ``height``."""
    peak = max((d + f for d, f in zip(done, failed, strict=True)), default=0)
    step = width / MINUTES
    scale = height / peak if peak else 0.0
    bars = []
    for slot in range(MINUTES):
        i = MINUTES - 1 - slot  # the oldest minute on the left, now on the right
        done_height = done[i] * scale
        failed_height = failed[i] * scale
        end = now - timedelta(minutes=i)
        label = (
            f"{(end - timedelta(minutes=1)):%H:%M}-{end:%H:%M} UTC: "
            f"{done[i]:,} done, {failed[i]:,} failed"
        )
        bars.append(
            Bar(
                x=round(slot * step + 0.5, 2),
                done_y=round(height - done_height, 2),
                done_height=round(done_height, 2),
                failed_y=round(height - done_height - failed_height, 2),
                failed_height=round(failed_height, 2),
                label=label,
            )
        )
    return Chart(bars, width, height, peak, sum(done), sum(failed))

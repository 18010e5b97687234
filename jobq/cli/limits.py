"""`jobq limits`: set, show and clear per-queue concurrency and rate limits."""

from __future__ import annotations

from typing import Any

import click

from jobq.cli.common import database_url_option, store_for
from jobq.cli.output import table
from jobq.cli.params import Key
from jobq.db.errors import InvalidOption, UnknownLimit
from jobq.limits import Rate, parse_rate


class RateParam(click.ParamType):
    """A rate such as 10/2s or 100/1m: at most N starts in any window of PERIOD."""

    name = "N/PERIOD"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return parse_rate(value)
        except InvalidOption as error:
            self.fail(str(error.context.get("reason", error)), param, ctx)


@click.group()
def limits() -> None:
    """Per-queue limits, enforced across every worker (see `jobq worker --limiter`)."""


@limits.command("set")
@click.argument("queue", type=Key())
@click.option(
    "--concurrency", type=click.IntRange(min=1, max=2**31 - 1), default=None,
    help="At most N tasks of the queue in progress at once.",
)  # fmt: skip
@click.option(
    "--rate", type=RateParam(), default=None,
    help="At most N starts in any window of PERIOD, e.g. 10/2s or 100/1m.",
)  # fmt: skip
@database_url_option
def set_(queue: str, concurrency: int | None, rate: Rate | None, database_url: str) -> None:
    """Limit QUEUE; replaces its previous limit. Running tasks are never stopped."""
    if concurrency is None and rate is None:
        raise click.UsageError("give --concurrency, --rate, or both")
    with store_for(database_url) as store:
        limit = store.set_limit(queue, concurrency=concurrency, rate=rate)
    click.echo(f"queue {queue!r} limited: {limit}")


@limits.command()
@database_url_option
def show(database_url: str) -> None:
    """Every limited queue: its limits, tasks running now, and starts in the last period."""
    with store_for(database_url, read_only=True) as store:
        found = store.limits()
        usage = store.limit_usage()
    if not found:
        click.echo("no limits")
        return
    headers = ["queue", "concurrency", "rate", "running", "started in period"]
    rows = []
    for queue, limit in found.items():
        running, started = usage.get(queue, (0, 0))
        rows.append([
            queue,
            "-" if limit.concurrency is None else str(limit.concurrency),
            "-" if limit.rate is None else str(limit.rate),
            str(running),
            "-" if limit.rate is None else str(started),
        ])  # fmt: skip
    click.echo(table(headers, rows))


@limits.command()
@click.argument("queue", type=Key())
@database_url_option
def clear(queue: str, database_url: str) -> None:
    """Remove QUEUE's limit: its tasks run as freely as any other queue's."""
    with store_for(database_url) as store:
        if not store.clear_limit(queue):
            raise UnknownLimit(queue=queue)
    click.echo(f"queue {queue!r} is no longer limited")

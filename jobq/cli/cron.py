"""`jobq cron`: list the cron schedules and their last runs, run one now, disable and
enable them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from jobq.cli.common import database_url_option, store_for
from jobq.cli.output import table, when
from jobq.cli.params import Key
from jobq.cron.periodic import ScheduleState
from jobq.cron.runs import KEPT_RUNS
from jobq.db.tasks import Status

#: `jobq status`'s table of schedules, one line per queue.
SUMMARY_HEADERS = ["queue", "schedules", "running", "disabled", "no longer defined"]


@click.group()
def cron() -> None:
    """Cron schedules (app.periodic); workers store them when they start."""


@cron.command("list")
@click.option(
    "--runs",
    "runs_of",
    metavar="NAME",
    type=Key(),
    help=f"Instead, the last runs of schedule NAME (up to {KEPT_RUNS}), newest first.",
)
@database_url_option
def list_(runs_of: str | None, database_url: str) -> None:
    """Every schedule: name, expression, next run, last run and last status.

    A disabled schedule, or one no longer defined by the app of the workers serving its
    queue, shows its state instead of a next run. With --runs NAME, the last runs of
    schedule NAME instead: when each started and ended, how (done, failed, timed out,
    lease expired, cancelled, released), and its error's main line.
    """
    if runs_of is not None:
        _list_runs(runs_of, database_url)
        return
    with store_for(database_url, read_only=True) as store:
        found = store.schedules()
    if not found:
        click.echo("no schedules")
        return
    headers = ["name", "cron", "task", "queue", "next run", "last run", "last status"]
    rows = [
        [
            state.name, _expression(state), state.task, state.queue, _next_run(state),
            when(state.last_run), _last_status(state),
        ]
        for state in found
    ]  # fmt: skip
    click.echo(table(headers, rows))


@cron.command()
@click.argument("name", type=Key())
@database_url_option
def run(name: str, database_url: str) -> None:
    """Enqueue one run of schedule NAME now; its schedule stays as it is."""
    with store_for(database_url) as store:
        task_id = store.run_schedule_now(name)
    click.echo(f"enqueued task {task_id} (a run of schedule {name!r})")


@cron.command()
@click.argument("name", type=Key())
@database_url_option
def disable(name: str, database_url: str) -> None:
    """Stop schedule NAME from running (a run under way finishes) until enabled again."""
    with store_for(database_url) as store:
        store.set_schedule_enabled(name, False)
    click.echo(f"disabled schedule {name!r}")


@cron.command()
@click.argument("name", type=Key())
@database_url_option
def enable(name: str, database_url: str) -> None:
    """Run schedule NAME again, from its next tick."""
    with store_for(database_url) as store:
        store.set_schedule_enabled(name, True)
        state = next(s for s in store.schedules() if s.name == name)
    if state.status is Status.IN_PROGRESS:
        click.echo(f"enabled schedule {name!r}; it is running now, then runs from its next tick")
    elif state.defined:
        click.echo(f"enabled schedule {name!r}; next run {when(state.next_run)}")
    else:
        click.echo(
            f"enabled schedule {name!r}; it runs again once the app of the workers serving "
            f"queue {state.queue!r} defines it"
        )


def _list_runs(name: str, database_url: str) -> None:
    with store_for(database_url, read_only=True) as store:
        runs = store.schedule_runs(name)
    if not runs:
        click.echo(f"no runs of schedule {name!r} yet")
        return
    # No attempt: a schedule's row counts its captures across every tick, which tells a
    # user nothing; each run's status says whether its tick was retried.
    headers = ["started", "ended", "status", "error"]
    rows = [
        [when(run.started_at), when(run.finished_at), run.status,
         _printable(run.error_summary or "-")]
        for run in runs
    ]  # fmt: skip
    click.echo(table(headers, rows))


def summary(states: Sequence[ScheduleState]) -> str | None:
    """`jobq status`'s table of ``states`` per queue (None if there are none): how many
    schedules, how many running now, disabled, and no longer defined by the app."""
    if not states:
        return None
    return table(SUMMARY_HEADERS, [list(counts.values()) for counts in summary_counts(states)])


def summary_counts(states: Sequence[ScheduleState]) -> list[dict[str, Any]]:
    """Per queue (in name order): queue, schedules, running, disabled, no_longer_defined."""
    rows = []
    for queue in sorted({state.queue for state in states}):
        of_queue = [state for state in states if state.queue == queue]
        rows.append(
            {
                "queue": queue,
                "schedules": len(of_queue),
                "running": sum(state.status is Status.IN_PROGRESS for state in of_queue),
                "disabled": sum(not state.enabled for state in of_queue),
                # A schedule both disabled and undefined counts as disabled, as list shows it.
                "no_longer_defined": sum(state.enabled and not state.defined for state in of_queue),
            }
        )
    return rows


def _printable(text: str) -> str:
    # A terminal cannot print lone surrogates (undecodable bytes in a str): escape them.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _expression(state: ScheduleState) -> str:
    return state.cron if state.timezone == "UTC" else f"{state.cron} ({state.timezone})"


def _next_run(state: ScheduleState) -> str:
    if not state.enabled:
        return "disabled"
    if not state.defined:
        return "disabled (no longer defined)"
    if state.status is Status.IN_PROGRESS:
        return "running"
    return when(state.next_run)


def _last_status(state: ScheduleState) -> str:
    if state.status is Status.IN_PROGRESS:
        return "running"
    return state.last_status or "-"

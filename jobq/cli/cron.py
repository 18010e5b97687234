"""`jobq cron`: list the cron schedules, run one now, disable and enable them."""

from __future__ import annotations

import click

from jobq.cli.common import database_url_option, store_for
from jobq.cli.output import table, when
from jobq.cli.params import Key
from jobq.periodic import ScheduleState
from jobq.tasks import Status


@click.group()
def cron() -> None:
    """Cron schedules (app.periodic); workers store them when they start."""


@cron.command("list")
@database_url_option
def list_(database_url: str) -> None:
    """Every schedule: name, expression, next run, last run and last status.

    A disabled schedule, or one no longer defined by the app of the workers serving its
    queue, shows its state instead of a next run.
    """
    with store_for(database_url) as store:
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

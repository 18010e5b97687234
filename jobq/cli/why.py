"""`jobq why ID`: why a task is or is not running, in a line or a few."""

from __future__ import annotations

import json

import click

from jobq.cli.common import TASK_ID, database_url_option, store_for
from jobq.db.errors import JobqError, TaskNotFound


@click.command()
@click.argument("task_id", metavar="ID", type=TASK_ID)
@click.option("--json", "as_json", is_flag=True, help="The same as a JSON object.")
@database_url_option
def why(task_id: int, as_json: bool, database_url: str) -> None:
    """Why task ID is or is not running, from the rows alone.

    Due later, waiting for its retry, held back by its lock key or its queue's limit, no
    live worker serving its queue, ready, running (where, since when, its heartbeat and
    lease), or finished (how, when, the last line of its error).
    """
    with store_for(database_url, read_only=True) as store:
        try:
            explanation = store.explain(task_id)
        except TaskNotFound:
            raise JobqError(f"no task with id {task_id}") from None
    if as_json:
        click.echo(json.dumps(explanation.to_json(), sort_keys=True, ensure_ascii=False))
        return
    click.echo(f"task {task_id}: {explanation.reason}")
    for line in explanation.lines:
        # A terminal cannot print lone surrogates (an error's undecodable bytes): escape them.
        click.echo(f"  {line}".encode("utf-8", "backslashreplace").decode("utf-8"))

"""The shop's tasks, found by the worker as the ``tasks`` module of an installed app."""

from django.tasks import TaskContext, task

from shop.models import Order


class Boom(Exception):
    pass


@task
def add(a: int, b: int) -> int:
    return a + b


@task(queue_name="emails", priority=10)
def send_receipt(order_id: int) -> str:
    return f"receipt for {Order.objects.get(pk=order_id).item}"


@task
def mark_paid(order_id: int) -> int:
    return Order.objects.filter(pk=order_id).update(paid=True)


@task
def fail(message: str) -> None:
    raise Boom(message)


@task
def flaky() -> int:  # retries=1 in the settings' TASK_OPTIONS
    raise Boom("always")


@task(takes_context=True)
def whoami(context: TaskContext, label: str) -> dict:
    return {"attempt": context.attempt, "id": context.task_result.id, "label": label}


@task
async def double(x: int) -> int:
    return 2 * x


# Django's own contract (tests/django/test_contract.py): the tasks its tests run.
@task
def noop(*args: object, **kwargs: object) -> None:
    return None


@task
async def noop_async(*args: object, **kwargs: object) -> None:
    return None


@task
def failing_value_error() -> None:
    raise ValueError("This task failed due to ValueError")


@task
def failing_system_exit() -> None:
    raise SystemExit("This task failed due to SystemExit")


@task
def complex_exception() -> None:
    raise ValueError(ValueError("This task failed"))


@task
def complex_return_value() -> object:
    return {1, 2}  # a set: not JSON


@task(takes_context=True)
def observe(context: TaskContext) -> dict:
    """What the backend says of this run while it runs."""
    seen = observe.get_result(context.task_result.id)
    return {
        "status": seen.status, "context_status": context.task_result.status,
        "worker_ids": seen.worker_ids, "attempt": context.attempt,
        "started": seen.started_at.isoformat(), "id": context.task_result.id,
    }  # fmt: skip


@task(takes_context=True)
async def observe_async(context: TaskContext, x: int) -> dict:
    return {"attempt": context.attempt, "id": context.task_result.id, "x": x}

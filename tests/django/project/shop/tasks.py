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

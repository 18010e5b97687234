"""App: the tasks a program defines, and the Store they are enqueued into. What users import."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection

from jobq.app.connections import adapted, refuse_unless_sqlalchemy
from jobq.app.controls import Controls
from jobq.app.enqueueing import enqueue_rows, given, signature, split_options, unknown_options
from jobq.app.schedules import schedule_of
from jobq.app.store import Store
from jobq.core.registry import Registry, TaskDefinition
from jobq.core.retry import Backoff, backoff_policy
from jobq.cron.periodic import Schedule
from jobq.cron.schedule import Cron
from jobq.db.errors import InvalidOption, UnknownTask
from jobq.db.validation import check_int
from jobq.engine.database import database_url
from jobq.lifecycle.handles import TaskHandle
from jobq.workflows.graph import Signature
from jobq.workflows.handle import WorkflowHandle


class App(Controls):
    """Tasks registered by name, and the Store they are enqueued into.

    The database URL is ``database_url``, else $JOBQ_DATABASE_URL, else sqlite:///jobq.db;
    the Store is created when first used (InvalidDatabaseURL then, if the URL is bad).
    ``enqueue_wait``: seconds an enqueue waits for a database it cannot reach (see Store).

    Example:
        ```python
        import jobq
        app = jobq.App()
        app.migrate()
        @app.task(queue="emails", retries=5)
        def send(to: str) -> str:
            return f"sent to {to}"
        assert send.enqueue(to="a@example.com").status == "queued"  # for `jobq worker`
        ```
    """

    def __init__(
        self, database_url: str | None = None, *, enqueue_wait: float | None = None
    ) -> None:
        self.registry = Registry()
        self._database_url = database_url
        self._enqueue_wait = enqueue_wait
        self._store: Store | None = None
        #: Cron schedules by name (app.periodic); workers store them when they start.
        self.schedules: dict[str, Schedule] = {}
        #: Called after each enqueue that is not inside a caller's transaction
        #: (jobq.testing's immediate mode runs the tasks there).
        self.after_enqueue: Callable[[], None] | None = None

    @property
    def store(self) -> Store:
        """The Store tasks are enqueued into and captured from."""
        if self._store is None:
            self._store = Store(database_url(self._database_url), enqueue_wait=self._enqueue_wait)
        return self._store

    @store.setter
    def store(self, store: Store) -> None:
        self._store = store

    def migrate(self) -> None:
        """Create or upgrade jobq's tables (Alembic upgrade head)."""
        self.store.migrate()

    def task(
        self,
        func: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        queue: str = "default",
        retries: int = 3,
        timeout: float | None = None,
        lease: float = 30,
        priority: int = 0,
        unique: str | None = None,
        lock: str | None = None,
        fair_key: str | None = None,
        backoff: Backoff | float | None = None,
    ) -> Any:
        """Make a sync or async function a TaskFunction: ``@app.task`` or ``@app.task(...)``.

        Args:
            name: the name rows and workers know it by; default the function's.
            queue: the queue its runs wait in.
            priority: higher priorities run first.
            retries: how many failures it may retry after (3: four attempts at most).
            timeout: seconds a run may take before it fails as timed out; None: no limit.
            lease: seconds a worker holds a run unless its heartbeat renews it.
            unique: a template formatted from the arguments (``"report:{day}"``): at most
                one pending task per key.
            lock: a template like ``unique``: no two runs of one key at once.
            fair_key: a template like ``unique`` (``"{customer_id}"``): the key a fair
                queue shares its captures by (see FairQueues; ``_fair_key`` at enqueue).
            backoff: seconds before a retry, jobq.FixedBackoff or jobq.ExponentialBackoff.

        Raises:
            InvalidOption: a bad option, or a template naming an argument the function
                does not take (here, not at run time).
            TypeError: ``backoff`` is not a number nor a policy.
        """

        def register(function: Callable[..., Any]) -> TaskFunction:
            definition = TaskDefinition(
                name=name or function.__name__, func=function, queue=queue, retries=retries,
                timeout=timeout, lease=float(lease), priority=priority, unique=unique, lock=lock,
                fair_key=fair_key, backoff=backoff_policy(name or function.__name__, backoff),
            )  # fmt: skip
            self.registry.add(definition)
            return TaskFunction(self, definition)

        return register(func) if func is not None else register

    def periodic(
        self,
        *,
        cron: str,
        name: str | None = None,
        queue: str | None = None,
        timezone: str = "UTC",
        kwargs: Mapping[str, Any] | None = None,
    ) -> Callable[[Any], TaskFunction]:
        """Run a task on a cron schedule: ``@app.periodic(cron="*/5 * * * *")``.

        It decorates a plain function (registered as a task with the default options) or
        a task registered with ``@app.task(...)``, placed below it; it returns the
        TaskFunction. Each tick runs once across all workers; ticks missed while no worker
        ran are one run. Each `jobq worker` stores its app's schedules as it starts.

        Args:
            cron: a croniter expression, read in ``timezone`` (an IANA name): five fields,
                or six with seconds last (``"* * * * * */10"``: every ten seconds).
            name: the schedule's (default: the task's); give one per schedule of a task.
            queue: the queue of its runs (default: the task's).
            kwargs: the arguments of every run.

        Raises:
            InvalidOption: a bad expression, timezone, name or queue; a name defined twice.
            InvalidTaskArguments: ``kwargs`` do not fit the function.

        Example:
            ```python
            import jobq
            app = jobq.App()
            @app.periodic(cron="0 3 * * *", timezone="Europe/Paris", kwargs={"days": 30})
            @app.task(queue="upkeep")
            def clean_up(days: int) -> None: ...
            assert app.schedules["clean_up"].args == {"days": 30}
            ```
        """
        schedule_cron = Cron(cron, timezone)

        def register(function: Any) -> TaskFunction:
            if isinstance(function, TaskFunction):
                if function.app is not self:
                    raise InvalidOption(
                        option="periodic", reason=f"{function!r} belongs to another app"
                    )
                definition = function.definition
            else:  # registered below, once every check has passed
                definition = TaskDefinition(name=function.__name__, func=function)
            schedule = schedule_of(
                definition, schedule_cron, name=name, queue=queue, kwargs=kwargs,
                defined=self.schedules,
            )  # fmt: skip
            task = function if isinstance(function, TaskFunction) else self.task(function)
            self.schedules[schedule.name] = schedule
            return task

        return register

    def definition(self, name: str) -> TaskDefinition:
        """The definition of the task registered as ``name``; UnknownTask if none is."""
        definition = self.registry.get(name)
        if definition is None:
            registered = ", ".join(sorted(d.name for d in self.registry)) or "none"
            raise UnknownTask(name=name, registered=registered)
        return definition

    def enqueue(
        self,
        name: str,
        kwargs: Mapping[str, Any] | None = None,
        *,
        delay: float | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        fair_key: str | None = None,
        connection: Connection | None = None,
    ) -> TaskHandle:
        """Enqueue a run of the task registered as ``name``; its TaskHandle.

        The handle is the new task's id (an int: it stores and serialises as one) that can
        also wait for the result, read the status and cancel the task. The arguments are
        checked against the function and for JSON first: a bad call writes nothing. The
        row takes the definition's queue, priority, retries, timeout, unique and lock
        keys; a ``unique`` key a pending task holds gives that task's handle.

        Args:
            kwargs: the task's keyword arguments (JSON values).
            delay: seconds from now before it may run; or ``run_at``, a datetime.
            priority: instead of the definition's.
            queue: instead of the definition's.
            fair_key: the key a fair queue shares its captures by, instead of the one
                the definition's ``fair_key`` template gives.
            connection: a SQLAlchemy connection whose transaction the row is written in
                (it commits or rolls back with it), or an object an adapter of
                jobq.app.connections takes (Django's, with jobq.contrib.django).

        Raises:
            UnknownTask: no task ``name`` is registered here.
            InvalidTaskArguments: arguments that do not fit or are not JSON (a TypeError).
            InvalidOption: a bad option (``delay`` and ``run_at`` together, say).

        Example:
            ```python
            import jobq
            app = jobq.App()
            app.migrate()
            @app.task(queue="mail")
            def notify(user: int) -> None: ...
            handle = app.enqueue("notify", {"user": 7}, delay=60)
            assert handle.status == "queued" and app.store.get(handle).queue_id == "mail"
            try:
                app.enqueue("notify", {"usr": 7})
            except jobq.InvalidTaskArguments as error:
                assert str(error) == "task 'notify': missing a required argument: 'user'"
            ```
        """
        definition = self.definition(name)
        arguments = definition.check_arguments(kwargs, json=False)  # Store.enqueue encodes
        options = definition.row_options(arguments)
        options.update(given(queue=queue, priority=priority, fair_key=fair_key))
        with adapted(connection, self.store) as conn:
            task_id = self.store.enqueue(
                definition.name, arguments, run_at=run_at, delay=delay, connection=conn, **options
            )
        self._enqueued(connection)
        return TaskHandle(task_id, self.store)

    async def enqueue_async(
        self,
        name: str,
        kwargs: Mapping[str, Any] | None = None,
        *,
        delay: float | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        fair_key: str | None = None,
        connection: Connection | None = None,
    ) -> TaskHandle:
        """enqueue() for asyncio: the same arguments, checks, errors and TaskHandle; the loop
        runs on meanwhile (the write runs in a thread, so ``connection`` is a SQLAlchemy one
        or None): ``handle = await app.enqueue_async("notify", {"user": 7})``."""
        refuse_unless_sqlalchemy(connection)
        enqueue = functools.partial(
            self.enqueue, name, kwargs, delay=delay, run_at=run_at, priority=priority,
            queue=queue, fair_key=fair_key, connection=connection,
        )  # fmt: skip
        return await asyncio.to_thread(enqueue)

    def handle(self, id: int) -> TaskHandle:
        """The TaskHandle of task ``id`` of this app's Store, for a task enqueued elsewhere
        (another process, say): ``app.handle(7).result()``. Nothing is read here: an
        unknown id raises TaskNotFound when the handle is used. InvalidOption if ``id`` is
        not an int."""
        check_int("id", id)
        return TaskHandle(int(id), self.store)

    def workflow(self, id: int) -> WorkflowHandle:
        """The WorkflowHandle of workflow ``id`` of this app's Store, read from its rows.
        WorkflowNotFound if it has none (it never existed, or its nodes were pruned);
        InvalidOption if ``id`` is not an int."""
        check_int("id", id)
        return WorkflowHandle.of(self.store, int(id))

    def enqueue_many(
        self,
        name: str,
        kwargs_list: Iterable[Mapping[str, Any] | None],
        *,
        delay: float | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        fair_key: str | None = None,
        connection: Connection | None = None,
    ) -> list[TaskHandle]:
        """Enqueue task ``name`` once per entry of ``kwargs_list``, with enqueue()'s
        options and errors; their TaskHandles, in order (see TaskFunction.enqueue_many).

        Every entry is checked before any is written; all go in one transaction (or
        ``connection``'s), 5,000 rows a statement unless the task has unique or lock keys.
        """
        definition = self.definition(name)
        checked = [definition.check_arguments(kwargs) for kwargs in kwargs_list]
        with adapted(connection, self.store) as conn:
            options = dict(
                queue=queue, priority=priority, run_at=run_at, delay=delay, fair_key=fair_key
            )
            ids = enqueue_rows(self.store, definition, checked, conn, **options)
        self._enqueued(connection)
        return [TaskHandle(task_id, self.store) for task_id in ids]

    def _connection(self, given: object) -> AbstractContextManager[Connection | None]:
        return adapted(given, self.store)  # Workflow.enqueue's connection, as enqueue's

    def _enqueued(self, connection: Connection | None) -> None:
        if connection is None and self.after_enqueue is not None:
            self.after_enqueue()


class TaskFunction:
    """A function registered as a task (``@app.task``): call it to run it here, or
    enqueue it. ``name`` is its task name and ``definition`` its options."""

    def __init__(self, app: App, definition: TaskDefinition) -> None:
        self.app = app
        self.definition = definition
        self.name = definition.name
        functools.update_wrapper(self, definition.func)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the function in this process, as if it were not a task."""
        return self.definition.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<task {self.name!r} of {self.definition.func!r}>"

    def enqueue(self, **kwargs: Any) -> TaskHandle:
        """Enqueue a run with these keyword arguments; its TaskHandle (an int: its id).

        Options start with an underscore so they never collide with the task's arguments:
        ``_delay`` (seconds), ``_run_at`` (datetime), ``_priority``, ``_queue``,
        ``_fair_key`` (instead of the definition's template) and ``_connection`` (enqueue
        inside that SQLAlchemy connection's transaction: the task exists only if it
        commits). Raises InvalidTaskArguments (arguments that do not fit
        the function or are not JSON; nothing is written) or InvalidOption (a bad option).
        """
        options = split_options(self.name, kwargs)
        return self.app.enqueue(self.name, kwargs, **options)

    def s(self, **kwargs: Any) -> Signature:
        """A jobq.Signature: this task with these arguments (checked now), to enqueue as a
        node of a workflow (jobq.chain, group, chord, Workflow). Options: ``_queue``,
        ``_priority``, ``_delay`` (from the workflow's enqueue), ``_run_at`` and
        ``_fair_key``.

        Raises:
            InvalidTaskArguments: bad arguments, an unknown option, or ``_connection``
                (give it to the workflow's enqueue()).
            InvalidWorkflow: the task has ``unique=``: it cannot be a node.
        """
        return signature(self.app, self.definition, kwargs)

    async def enqueue_async(self, **kwargs: Any) -> TaskHandle:
        """enqueue() for asyncio: the same arguments, options and errors, without
        blocking the loop: ``handle = await send.enqueue_async(to="a@example.com")``."""
        options = split_options(self.name, kwargs)
        return await self.app.enqueue_async(self.name, kwargs, **options)

    def enqueue_many(
        self, kwargs_list: Iterable[Mapping[str, Any]], **options: Any
    ) -> list[TaskHandle]:
        """Enqueue one run per entry of ``kwargs_list``, sharing the underscore options
        (``_delay``, ``_run_at``, ``_priority``, ``_queue``, ``_fair_key``, ``_connection``); their
        TaskHandles, in order. See App.enqueue_many.

        Raises:
            InvalidTaskArguments: an entry that does not fit (nothing is written), or an
                unknown option.

        Example:
            ```python
            import jobq
            app = jobq.App()
            app.migrate()
            @app.task
            def index(doc: int) -> None: ...
            handles = index.enqueue_many([{"doc": n} for n in range(3)], _queue="bulk")
            assert len(handles) == app.store.counts()[("bulk", jobq.Status.QUEUED)] == 3
            ```
        """
        unknown_options(self.name, options)
        return self.app.enqueue_many(
            self.name, kwargs_list, **{k.lstrip("_"): v for k, v in options.items()}
        )

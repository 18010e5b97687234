"""Task definitions and the registry that maps names to them. No database, no globals."""

from __future__ import annotations

import functools
import inspect
import string
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from jobq.core.retry import Backoff, ExponentialBackoff, backoff_policy, retry_delay
from jobq.db.errors import InvalidOption, InvalidTaskArguments
from jobq.db.payload import check_args, encode_args
from jobq.db.validation import INT32, check_int, check_key, check_seconds


@dataclass(frozen=True)
class TaskDefinition:
    """A registered task: its function and the options every enqueue of it uses."""

    name: str
    func: Callable[..., Any]
    queue: str = "default"
    retries: int = 3
    timeout: float | None = None
    lease: float = 30.0
    priority: int = 0
    #: Template of the unique_key, formatted from the arguments ("report:{day}").
    unique: str | None = None
    #: Template of the lock_key, formatted from the arguments ("ledger:{holder_id}").
    lock: str | None = None
    #: Template of the fair_key, formatted from the arguments ("{customer_id}").
    fair_key: str | None = None
    #: Given as a policy or a number of seconds (a FixedBackoff); always a policy here.
    backoff: Backoff = field(default_factory=ExponentialBackoff)

    def __post_init__(self) -> None:
        check_key("name", self.name, required=True)
        # A frozen dataclass: the number given becomes its policy once, here.
        object.__setattr__(self, "backoff", backoff_policy(self.name, self.backoff))
        check_key("queue", self.queue, required=True)
        check_int("retries", self.retries, minimum=0, maximum=INT32[1])
        check_int("priority", self.priority, minimum=INT32[0], maximum=INT32[1])
        check_seconds("lease", self.lease, positive=True)
        if self.timeout is not None:
            check_seconds("timeout", self.timeout, positive=True)
        parameters = self.signature.parameters.values()
        for parameter in parameters:
            if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.VAR_POSITIONAL):
                raise InvalidOption(
                    option="task",
                    reason=f"{self.name!r} takes positional-only argument {parameter.name!r}; "
                    "jobq calls tasks with keyword arguments",
                )
            if parameter.name.startswith("_"):
                raise InvalidOption(
                    option="task",
                    reason=f"{self.name!r} has argument {parameter.name!r}; names starting "
                    "with '_' are reserved for enqueue options (_delay, _queue, ...)",
                )
        templates = (("unique", self.unique), ("lock", self.lock), ("fair_key", self.fair_key))
        for option, template in templates:
            if template is not None:
                for field_name in _template_fields(option, template):
                    if field_name not in self.signature.parameters and not self._takes_any_kwargs:
                        raise InvalidOption(
                            option=option,
                            reason=f"template {template!r} of task {self.name!r} names "
                            f"{field_name!r}, which is not one of its arguments",
                        )

    @functools.cached_property
    def signature(self) -> inspect.Signature:
        return inspect.signature(self.func)

    @functools.cached_property
    def _keywords(self) -> tuple[frozenset[str], frozenset[str], bool]:
        """The argument names the function takes, those it requires, and whether it takes
        any other (``**kwargs``): what Signature.bind checks of a call by keyword, which is
        how jobq calls tasks (__post_init__ refuses positional-only and ``*args``)."""
        parameters = [p for p in self.signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
        names = frozenset(p.name for p in parameters)
        required = frozenset(p.name for p in parameters if p.default is p.empty)
        return names, required, self._takes_any_kwargs

    @property
    def is_async(self) -> bool:
        """Whether the function is a coroutine function (run on the worker's event loop)."""
        return inspect.iscoroutinefunction(self.func)

    @property
    def _takes_any_kwargs(self) -> bool:
        return any(p.kind is p.VAR_KEYWORD for p in self.signature.parameters.values())

    def check_arguments(
        self, kwargs: Mapping[str, Any] | None, *, json: bool = True
    ) -> dict[str, Any]:
        """``kwargs`` checked against the signature and (unless not ``json``, for a caller
        whose Store call encodes them before it writes anything) for JSON.

        Raises InvalidTaskArguments (a TypeError) for a missing or unexpected argument or a
        value that is not JSON, naming the task and the argument.
        """
        arguments = check_args(self.name, kwargs)
        names, required, any_other = self._keywords
        given = arguments.keys()
        if not (required <= given and (any_other or given <= names)):
            try:  # Signature.bind's words for what is wrong (a tenth of the speed)
                self.signature.bind(**arguments)
            except TypeError as error:
                raise InvalidTaskArguments(f"task {self.name!r}: {error}") from None
        if json:
            encode_args(self.name, arguments)
        return arguments

    def retry_delay(self, attempt: int) -> float:
        """Seconds before the retry after failed attempt ``attempt``, by this task's backoff
        (the default's, logged, where that raises: jobq.core.retry.retry_delay). Never raises."""
        return retry_delay(self.backoff, attempt, whose=f"task {self.name!r}")

    def with_timeout(self, timeout: float | None) -> TaskDefinition:
        """This definition, but ``timeout`` (a run's own, given at enqueue) when not None."""
        if timeout is None or timeout == self.timeout:
            return self
        return replace(self, timeout=timeout)

    def row_options(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The Store.enqueue options this definition gives a row of ``arguments`` (checked):
        queue, priority, retries, timeout, unique, lock and fair keys. Lease and backoff are not
        among them: the worker that runs the row applies its own definition's. The timeout
        is, so that `jobq status` and `jobq show` can tell a run past it from the row."""
        return {
            "queue": self.queue,
            "priority": self.priority,
            "retries": self.retries,
            "timeout": self.timeout,
            "unique_key": self.unique_key(arguments),
            "lock_key": self.lock_key(arguments),
            "fair_key": self.fair_key_of(arguments),
        }

    def unique_key(self, arguments: Mapping[str, Any]) -> str | None:
        """The unique_key for these arguments, from the ``unique`` template."""
        return _format(self.name, "unique", self.unique, arguments)

    def lock_key(self, arguments: Mapping[str, Any]) -> str | None:
        """The lock_key for these arguments, from the ``lock`` template."""
        return _format(self.name, "lock", self.lock, arguments)

    def fair_key_of(self, arguments: Mapping[str, Any]) -> str | None:
        """The fair_key for these arguments, from the ``fair_key`` template."""
        return _format(self.name, "fair_key", self.fair_key, arguments)


class Registry:
    """Task definitions by name."""

    def __init__(self) -> None:
        self._definitions: dict[str, TaskDefinition] = {}

    def add(self, definition: TaskDefinition) -> None:
        """Register ``definition``; a second task of the same name is an error."""
        existing = self._definitions.get(definition.name)
        if existing is not None and existing.func is not definition.func:
            raise InvalidOption(
                option="name",
                reason=f"a task named {definition.name!r} is already registered "
                f"({_describe(existing.func)})",
            )
        self._definitions[definition.name] = definition

    def get(self, name: str) -> TaskDefinition | None:
        """The definition registered as ``name``, if any."""
        return self._definitions.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._definitions

    def __iter__(self) -> Iterator[TaskDefinition]:
        return iter(self._definitions.values())

    def __len__(self) -> int:
        return len(self._definitions)


def _template_fields(option: str, template: str) -> list[str]:
    """The field names a format template uses; only plain names are allowed."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as error:
        raise InvalidOption(option=option, reason=f"bad template {template!r}: {error}") from None
    fields = [name for _, name, _, _ in parsed if name is not None]
    for name in fields:
        if not name.isidentifier():
            raise InvalidOption(
                option=option,
                reason=f"template {template!r} may only name arguments, not {name!r}",
            )
    return fields


def _format(
    task: str, option: str, template: str | None, arguments: Mapping[str, Any]
) -> str | None:
    if template is None:
        return None
    try:
        key = template.format_map(arguments)
    except KeyError as error:
        raise InvalidTaskArguments(
            f"task {task!r}: {option} template {template!r} needs argument {error.args[0]!r}"
        ) from None
    except (ValueError, TypeError) as error:  # a format spec that does not fit the value
        raise InvalidTaskArguments(
            f"task {task!r}: {option} template {template!r} cannot format the arguments: {error}"
        ) from None
    except RecursionError:  # str() of a value nested thousands deep: checked before JSON is
        raise InvalidTaskArguments(
            f"task {task!r}: {option} template {template!r} cannot format the arguments: "
            "they nest too deeply"
        ) from None
    check_key(option, key, required=True)
    return key


def _describe(func: Callable[..., Any]) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', func)!s}"

"""Task definitions: checked at decoration, arguments checked before anything is written."""

from __future__ import annotations

import datetime as dt
import inspect

import pytest

import jobq
from jobq.core.registry import Registry, TaskDefinition


def send(to: str, subject: str = "hi", *, cc: list[str] | None = None) -> None: ...


def test_arguments_are_checked_against_the_signature() -> None:
    definition = TaskDefinition(name="send", func=send)
    assert definition.check_arguments({"to": "a@x.org"}) == {"to": "a@x.org"}
    with pytest.raises(TypeError, match=r"task 'send': missing a required argument: 'to'"):
        definition.check_arguments({"subject": "s"})
    with pytest.raises(TypeError, match=r"task 'send': got an unexpected keyword argument 'bcc'"):
        definition.check_arguments({"to": "a", "bcc": "b"})
    with pytest.raises(jobq.InvalidTaskArguments, match=r"'cc'"):
        definition.check_arguments({"to": "a", "cc": {dt.date.today()}})


@pytest.mark.parametrize(
    ("func", "fragment"),
    [
        (lambda a, /: None, "positional-only argument 'a'"),
        (lambda *args: None, "positional-only argument 'args'"),
        (lambda _delay: None, "reserved for enqueue options"),
    ],
)
def test_functions_jobq_cannot_call_safely_are_refused(func: object, fragment: str) -> None:
    with pytest.raises(jobq.InvalidOption, match=fragment):
        TaskDefinition(name="t", func=func)  # type: ignore[arg-type]


def test_templates_must_name_arguments() -> None:
    with pytest.raises(jobq.InvalidOption, match=r"names 'user', which is not one of its"):
        TaskDefinition(name="send", func=send, unique="mail:{user}")
    with pytest.raises(jobq.InvalidOption, match=r"may only name arguments"):
        TaskDefinition(name="send", func=send, lock="mail:{to.upper}")
    with pytest.raises(jobq.InvalidOption, match=r"bad template"):
        TaskDefinition(name="send", func=send, lock="mail:{to")
    definition = TaskDefinition(name="send", func=send, unique="mail:{to}", lock="l:{subject}")
    assert definition.unique_key({"to": "a@x.org"}) == "mail:a@x.org"
    with pytest.raises(TypeError, match=r"lock template 'l:\{subject\}' needs argument 'subject'"):
        definition.lock_key({"to": "a@x.org"})


def test_any_keyword_function_accepts_any_template_field() -> None:
    definition = TaskDefinition(name="t", func=lambda **kw: None, lock="k:{anything}")
    assert definition.lock_key({"anything": 3}) == "k:3"


def test_bad_options_are_refused_at_decoration() -> None:
    with pytest.raises(jobq.InvalidOption, match="retries"):
        TaskDefinition(name="t", func=send, retries=-1)
    with pytest.raises(jobq.InvalidOption, match="timeout"):
        TaskDefinition(name="t", func=send, timeout=0)
    with pytest.raises(jobq.InvalidOption, match="queue"):
        TaskDefinition(name="t", func=send, queue="")


def test_registry_refuses_two_functions_under_one_name() -> None:
    registry = Registry()
    registry.add(TaskDefinition(name="send", func=send))
    registry.add(TaskDefinition(name="send", func=send))  # the same function: harmless
    with pytest.raises(jobq.InvalidOption, match="already registered"):
        registry.add(TaskDefinition(name="send", func=lambda to: None))
    assert "send" in registry and len(registry) == 1 and registry.get("nope") is None


def test_async_functions_are_recognised() -> None:
    async def fetch(url: str) -> None: ...

    assert TaskDefinition(name="fetch", func=fetch).is_async
    assert not TaskDefinition(name="send", func=send).is_async


def _plain(a: int, b: int = 2, *, c: int, d: int = 4) -> None: ...


def _open(a: int, **rest: object) -> None: ...


@pytest.mark.parametrize("func", [_plain, _open])
@pytest.mark.parametrize(
    "kwargs",
    [{}, {"a": 1}, {"a": 1, "c": 3}, {"a": 1, "b": 2, "c": 3, "d": 4}, {"a": 1, "c": 3, "e": 5},
     {"c": 3}, {"e": 5}],
)  # fmt: skip
def test_check_arguments_accepts_what_signature_bind_accepts(func: object, kwargs: dict) -> None:
    """check_arguments checks names itself (ten times faster) and leaves the words of a
    refusal to Signature.bind: both must agree on every call by keyword."""
    definition = TaskDefinition(name="t", func=func)  # type: ignore[arg-type]
    try:
        inspect.signature(func).bind(**kwargs)  # type: ignore[arg-type]
        bound = True
    except TypeError:
        bound = False
    if bound:
        assert definition.check_arguments(kwargs) == kwargs
    else:
        with pytest.raises(TypeError, match="task 't': "):
            definition.check_arguments(kwargs)


def test_a_key_of_arguments_nested_thousands_deep_is_refused_not_crashed() -> None:
    """App.enqueue formats the keys before it encodes the JSON (which would refuse such
    arguments): the formatting must refuse them too, with the one error enqueue raises."""

    def report(day: object) -> None: ...

    definition = TaskDefinition(name="report", func=report, unique="report:{day}")
    nested: list[object] = []
    for _ in range(5000):
        nested = [nested]
    with pytest.raises(jobq.InvalidTaskArguments, match="nest too deeply"):
        definition.unique_key({"day": nested})


def test_a_number_as_backoff_is_a_fixed_delay_in_seconds() -> None:
    app = jobq.App("sqlite://")

    @app.task(retries=1, backoff=1)
    def every_second() -> None: ...

    @app.task(backoff=2.5)
    def every_while() -> None: ...

    @app.task(backoff=0)  # no wait at all, not the default
    def at_once() -> None: ...

    assert every_second.definition.backoff == jobq.FixedBackoff(1.0)
    assert every_while.definition.backoff == jobq.FixedBackoff(2.5)
    assert at_once.definition.backoff == jobq.FixedBackoff(0.0)
    assert TaskDefinition(name="send", func=send, backoff=3).retry_delay(1) == 3.0  # type: ignore[arg-type]
    policy = jobq.ExponentialBackoff(base=2)
    assert TaskDefinition(name="send", func=send, backoff=policy).backoff is policy


@pytest.mark.parametrize(
    "value", ["1", [1], jobq.FixedBackoff, jobq.ExponentialBackoff, object(), True, {"delay": 1}]
)
def test_what_is_no_backoff_policy_is_refused_at_decoration(value: object) -> None:
    app = jobq.App("sqlite://")
    with pytest.raises(TypeError) as raised:

        @app.task(backoff=value)  # type: ignore[arg-type]
        def send_later() -> None: ...

    message = str(raised.value)
    assert "'send_later'" in message and repr(value) in message
    assert "jobq.FixedBackoff" in message and "jobq.ExponentialBackoff" in message
    assert "send_later" not in app.registry
    with pytest.raises(TypeError, match=r"task 'send': backoff="):
        TaskDefinition(name="send", func=send, backoff=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [-1, float("inf"), float("nan"), 10**400])
def test_a_number_of_seconds_out_of_range_is_refused_at_decoration(value: float) -> None:
    app = jobq.App("sqlite://")
    with pytest.raises(ValueError, match=r"task 'send_later': backoff=.* is not a number of sec"):

        @app.task(backoff=value)
        def send_later() -> None: ...

    with pytest.raises(ValueError, match=r"FixedBackoff needs seconds"):
        jobq.FixedBackoff(value)


class Broken:
    """A policy whose delay raises, or returns what is not a number of seconds."""

    def __init__(self, gives: object) -> None:
        self.gives = gives

    def delay(self, attempt: int) -> float:
        if isinstance(self.gives, Exception):
            raise self.gives
        return self.gives  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"Broken({self.gives!r})"


@pytest.mark.parametrize("gives", [RuntimeError("no clock"), None, -5, float("nan"), "3"])
def test_a_policy_failing_at_run_time_falls_back_to_the_default_and_says_so(
    gives: object, caplog: pytest.LogCaptureFixture
) -> None:
    definition = TaskDefinition(name="send", func=send, backoff=Broken(gives))  # type: ignore[arg-type]
    with caplog.at_level("ERROR", logger="jobq.retry"):
        delay = definition.retry_delay(3)
    default = jobq.ExponentialBackoff()
    assert (
        default.delay(3) * (1 - default.jitter) <= delay <= default.delay(3) / (1 - default.jitter)
    )
    [line] = caplog.records
    assert line.getMessage().startswith(f"task 'send': backoff Broken({gives!r}) ")
    assert "retrying after the default backoff" in line.getMessage()

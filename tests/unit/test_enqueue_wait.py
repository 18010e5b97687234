"""How long an enqueue waits: given, else $JOBQ_ENQUEUE_WAIT, else 5 s; checked."""

from __future__ import annotations

import pytest

import jobq
from jobq.core.enqueue_wait import DEFAULT_ENQUEUE_WAIT


def test_the_wait_is_given_else_the_variable_else_5_s(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOBQ_ENQUEUE_WAIT", raising=False)
    assert jobq.Store("sqlite:///x.db").enqueue_wait == DEFAULT_ENQUEUE_WAIT == 5.0
    monkeypatch.setenv("JOBQ_ENQUEUE_WAIT", "1m")
    assert jobq.Store("sqlite:///x.db").enqueue_wait == 60.0
    assert jobq.Store("sqlite:///x.db", enqueue_wait=0).enqueue_wait == 0.0
    assert jobq.App("sqlite:///x.db", enqueue_wait=2.5).store.enqueue_wait == 2.5
    store = jobq.Store("sqlite:///x.db")
    store.enqueue_wait = 7
    assert store.enqueue_wait == store.enqueuer.wait == 7.0


@pytest.mark.parametrize("bad", [-1, float("nan"), "5", True])
def test_a_bad_wait_is_refused(bad: object) -> None:
    with pytest.raises(jobq.InvalidOption, match="enqueue_wait"):
        jobq.Store("sqlite:///x.db", enqueue_wait=bad)  # type: ignore[arg-type]
    with pytest.raises(jobq.InvalidOption, match="enqueue_wait"):
        assert jobq.App("sqlite:///x.db", enqueue_wait=bad).store  # type: ignore[arg-type]
    store = jobq.Store("sqlite:///x.db")
    with pytest.raises(jobq.InvalidOption, match="enqueue_wait"):
        store.enqueue_wait = bad  # type: ignore[assignment]


def test_a_bad_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBQ_ENQUEUE_WAIT", "soon")
    with pytest.raises(jobq.InvalidOption) as raised:
        jobq.Store("sqlite:///x.db")
    assert str(raised.value).startswith("Option 'JOBQ_ENQUEUE_WAIT' is invalid: 'soon' is not")

"""The worker's log lines: their wording (pure functions of jobq.worker.logs), the text format's
time, and the handler that writes them in batches."""

from __future__ import annotations

import io
import logging
import sys
import threading
import time
from collections import Counter
from datetime import datetime

import pytest

from jobq.worker.logs import (
    LineBuffer,
    RecordMaker,
    TextFormatter,
    in_and_at,
    lost_connection_reset,
    seconds,
    stopped_summary,
)


def test_delays_read_as_seconds_under_a_minute_and_units_beyond() -> None:
    assert [seconds(s) for s in (0, 8, 59.94, 125, 3 * 3600)] == [
        "0.0s", "8.0s", "59.9s", "2m 5s", "3h",
    ]  # fmt: skip


def test_in_and_at_gives_the_local_time_and_the_date_only_when_not_today() -> None:
    morning = datetime(2026, 11, 24, 10, 31, 57).timestamp()
    assert in_and_at(8, now=morning) == "in 8.0s at 10:32:05"
    evening = datetime(2026, 11, 24, 23, 59, 0).timestamp()
    assert in_and_at(120, now=evening) == "in 2m at 2026-11-25 00:01:00"


def test_the_stopped_summary_is_a_sentence_without_zero_counts() -> None:
    stats = Counter(captured=10, done=8, failed=2, timed_out=0, rescued=1, slot_expired=3)
    assert stopped_summary(stats) == (
        "captured 10 tasks (8 done, 2 failed, 1 rescued after their leases expired, "
        "slot expired: 3)"
    )
    assert stopped_summary(Counter(captured=1, done=1)) == "captured 1 task (1 done)"
    assert stopped_summary(Counter()) == "captured 0 tasks"


def test_the_text_formatter_writes_the_time_as_logging_formatter_does() -> None:
    plain = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    cached = TextFormatter()
    start = time.time()
    for offset in (0.0, 0.001, 0.999, 1.0, 61.5, 86400.25):
        record = logging.makeLogRecord({"msg": "m %s", "args": (1,), "levelname": "INFO"})
        record.created = start + offset
        record.msecs = (record.created - int(record.created)) * 1000
        assert cached.format(record) == plain.format(record)
    failed = logging.makeLogRecord({"msg": "boom", "levelname": "ERROR"})
    try:
        raise ValueError("x")
    except ValueError:
        failed.exc_info = sys.exc_info()
    assert cached.format(failed) == plain.format(failed)
    assert "ValueError: x" in cached.format(failed)


class Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def kept() -> tuple[logging.Logger, Keep]:
    keep = Keep()
    logger = logging.getLogger(f"jobq.test.maker.{id(keep)}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(keep)
    return logger, keep


def test_a_record_maker_makes_the_record_logger_log_makes(
    kept: tuple[logging.Logger, Keep],
) -> None:
    """Every attribute of Logger.log's record, but the time and the line, from any thread."""
    logger, keep = kept
    maker = RecordMaker(logger)
    fields = {"task_id": 7, "task": "t", "queue": "q", "attempt": 2}

    def both() -> None:
        for _ in range(2):  # the second call copies what the first took
            maker.log(logging.INFO, "task %s %s", (7, "t"), fields)
        logger.log(logging.INFO, "task %s %s", 7, "t", extra=fields)

    both()
    thread = threading.Thread(target=both, name="another")
    thread.start()
    thread.join()
    assert len(keep.records) == 6
    changing = {"created", "msecs", "relativeCreated", "lineno"}
    for group in (keep.records[:3], keep.records[3:]):
        expected = {k: v for k, v in vars(group[2]).items() if k not in changing}
        for made in group[:2]:
            assert type(made) is logging.LogRecord
            assert {k: v for k, v in vars(made).items() if k not in changing} == expected
            assert made.getMessage() == "task 7 t"
            assert abs(made.created - group[2].created) < 5
            assert made.msecs == int((made.created - int(made.created)) * 1000)
    assert keep.records[3].threadName == "another"


def test_a_record_maker_keeps_to_the_level_and_to_a_record_factory(
    kept: tuple[logging.Logger, Keep], monkeypatch: pytest.MonkeyPatch
) -> None:
    logger, keep = kept
    maker = RecordMaker(logger)
    maker.log(logging.DEBUG, "hidden", (), {})
    assert keep.records == []

    class Marked(logging.LogRecord):
        pass

    monkeypatch.setattr(logging, "_logRecordFactory", Marked)
    maker.log(logging.INFO, "shown %d", (1,), {"task_id": 1})
    (record,) = keep.records
    assert type(record) is Marked and record.getMessage() == "shown 1" and record.task_id == 1


class Stream(io.StringIO):
    """A StringIO that counts its writes and says when one happened."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.written = threading.Event()

    def write(self, text: str) -> int:
        self.writes += 1
        self.written.set()
        return super().write(text)


@pytest.fixture
def buffered() -> tuple[logging.Logger, LineBuffer, Stream]:
    stream = Stream()
    handler = LineBuffer(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger(f"jobq.test.buffer.{id(handler)}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    return logger, handler, stream


def test_info_lines_are_written_together_soon_without_a_flush(
    buffered: tuple[logging.Logger, LineBuffer, Stream],
) -> None:
    logger, _, stream = buffered
    for i in range(100):
        logger.info("line %d", i)
    assert stream.written.wait(10), "the buffered lines were never written"
    deadline = time.monotonic() + 10
    while stream.getvalue().count("\n") < 100 and time.monotonic() < deadline:
        stream.written.clear()
        stream.written.wait(0.1)
    assert stream.getvalue().splitlines() == [f"INFO line {i}" for i in range(100)]
    assert stream.writes < 100  # in batches, not one write per line


def test_a_warning_is_written_at_once_after_the_lines_before_it(
    buffered: tuple[logging.Logger, LineBuffer, Stream],
) -> None:
    logger, _, stream = buffered
    logger.info("before")
    logger.warning("trouble")
    # No wait: the warning's own call wrote both.
    assert stream.getvalue().splitlines() == ["INFO before", "WARNING trouble"]


def test_flush_writes_what_is_buffered(buffered: tuple[logging.Logger, LineBuffer, Stream]) -> None:
    logger, handler, stream = buffered
    logger.info("last words")
    handler.flush()
    assert stream.getvalue() == "INFO last words\n"


def test_lines_logged_from_many_threads_at_once_are_all_written_in_each_threads_order(
    buffered: tuple[logging.Logger, LineBuffer, Stream],
) -> None:
    """Lines are queued without the handler's lock: none may be lost or reordered within a
    thread, whether the writer thread, a full buffer or a warning writes them."""
    logger, handler, stream = buffered
    threads, lines = 8, 3000

    def log_lines(t: int) -> None:
        for i in range(lines):
            if i % 997 == 0:
                logger.warning("t%d %d", t, i)
            else:
                logger.info("t%d %d", t, i)

    workers = [threading.Thread(target=log_lines, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    handler.flush()
    written = stream.getvalue().splitlines()
    assert len(written) == threads * lines
    for t in range(threads):
        mine = [int(line.split()[-1]) for line in written if line.split()[1] == f"t{t}"]
        assert mine == list(range(lines))


def pool_record(message: str, error: BaseException | None) -> logging.LogRecord:
    """A record as SQLAlchemy's pool logs it (pool.logger.error(..., exc_info=True))."""
    exc_info = None if error is None else (type(error), error, None)
    return logging.LogRecord(
        "sqlalchemy.pool.impl.QueuePool", logging.ERROR, __file__, 1, message, (), exc_info
    )


class OperationalError(Exception):
    """Named as the DB-API's error for a lost connection (PyMySQL's, psycopg's)."""


@pytest.mark.parametrize(
    "error", [OperationalError(2013, "Lost connection to MySQL server"), BrokenPipeError()]
)
def test_a_reset_of_a_lost_connection_is_left_out_of_the_worker_log(error: Exception) -> None:
    assert lost_connection_reset(pool_record("Exception during reset or similar", error))


def test_other_pool_errors_and_other_loggers_stay_in_the_worker_log() -> None:
    assert not lost_connection_reset(pool_record("Exception during reset or similar", None))
    assert not lost_connection_reset(
        pool_record("Exception during reset or similar", ValueError("a bug"))
    )
    assert not lost_connection_reset(pool_record("Error closing cursor", OperationalError()))
    other = pool_record("Exception during reset or similar", OperationalError())
    other.name = "jobq.worker"
    assert not lost_connection_reset(other)

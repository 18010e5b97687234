"""The hand-written reference pages name everything they list from the code: every
metric, outcome, span attribute and logger (docs/reference/metrics.md), every table,
column, index and status (tables.md), every environment variable and jobq's own URL
parameter (configuration.md). A name added to the code and not to its page fails here."""

from __future__ import annotations

import re
from pathlib import Path

import sqlalchemy as sa

from jobq.db.tasks import Status
from jobq.db.urls import POOLER_PARAMETER, POOLERS
from jobq.dialects.schema import metadata
from jobq.engine.migrations import VERSION_TABLE
from jobq.observe.metrics import OUTCOMES

ROOT = Path(__file__).resolve().parents[2]
JOBQ = ROOT / "jobq"
REFERENCE = ROOT / "docs" / "reference"
#: Loggers named in the code that no user sees: a default that every caller overrides.
UNSEEN_LOGGERS = {"jobq.counts"}


def page(name: str) -> str:
    return (REFERENCE / name).read_text(encoding="utf-8")


def found(pattern: str, *paths: Path) -> set[str]:
    """Every first group of ``pattern`` in the Python files under ``paths``."""
    names: set[str] = set()
    for path in paths:
        for file in [path] if path.is_file() else sorted(path.rglob("*.py")):
            names |= set(re.findall(pattern, file.read_text(encoding="utf-8")))
    return names


def missing(names: set[str], text: str) -> list[str]:
    """The names that ``text`` does not show as code (in backticks)."""
    return sorted(name for name in names if not re.search(rf"`{re.escape(name)}\b", text))


def test_every_metric_outcome_span_attribute_and_logger_is_in_metrics_md() -> None:
    text = page("metrics.md")
    observe = JOBQ / "observe"
    metrics = found(r'"(jobq_[a-z_]+)"', observe / "metrics.py", observe / "exporter.py")
    assert len(metrics) >= 10
    # A counter is exposed with the suffix _total.
    assert [name for name in sorted(metrics) if not re.search(rf"`{name}(_total)?`", text)] == []
    assert missing(set(OUTCOMES), text) == []
    tracing = [JOBQ / "core" / "tracing.py", JOBQ / "worker" / "run_spans.py"]
    attributes = found(r'"(jobq\.[a-z_]+)"', *tracing)
    spans = {f"jobq.{kind}" for kind in found(r'f"jobq\.([a-z]+) \{', *tracing)}
    assert {"jobq.task_id", "jobq.outcome"} <= attributes and spans == {
        "jobq.enqueue",
        "jobq.run",
    }
    assert missing(attributes | spans, text) == []
    loggers = found(r'getLogger\("(jobq[a-z._]*)"\)', JOBQ) - UNSEEN_LOGGERS
    assert "jobq.worker" in loggers
    assert missing(loggers, text) == []


def test_every_table_column_index_and_status_is_in_tables_md() -> None:
    text = page("tables.md")
    sections = dict(re.findall(r"^## `(jobq_[a-z_]+)`\n(.*?)(?=^## |\Z)", text, re.M | re.S))
    tables: dict[str, sa.Table] = dict(metadata.tables)
    assert sorted(sections) == sorted([*tables, VERSION_TABLE])
    for name, table in tables.items():
        assert missing({column.name for column in table.columns}, sections[name]) == [], name
        indexes = {str(index.name) for index in table.indexes if index.name}
        assert missing(indexes, sections[name]) == [], name
    assert missing({status.value for status in Status}, text) == []


def test_every_environment_variable_and_url_parameter_is_in_configuration_md() -> None:
    text = page("configuration.md")
    variables = found(r'envvar="(JOBQ_[A-Z_]+)"', JOBQ) | found(
        r'environ\.get\("(JOBQ_[A-Z_]+)"', JOBQ
    )
    assert {"JOBQ_DATABASE_URL", "JOBQ_APP"} <= variables
    assert missing(variables, text) == []
    assert missing({f"{POOLER_PARAMETER}={value}" for value in POOLERS}, text) == []

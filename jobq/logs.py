"""Worker logging: plain text lines or JSON lines, one per event.

Task lines carry their fields (task_id, task, attempt, status, duration_ms, error) as
``extra`` attributes of the record; the JSON format writes them as keys of their own, so
log pipelines need not parse the message.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: The extra attributes that JSON lines copy from a record when it has them.
FIELDS = ("task_id", "task", "attempt", "status", "duration_ms", "error")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for field in FIELDS:
            if field in record.__dict__:
                line[field] = record.__dict__[field]
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure(level: str, log_format: str) -> None:
    """Send the root logger's records to stderr at ``level``, as 'text' or 'json' lines."""
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # A worker only reads the schema's revision; Alembic announces its plugins at INFO
    # when it is imported for that, which is noise in a worker's log.
    logging.getLogger("alembic").setLevel(logging.WARNING)

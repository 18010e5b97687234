"""`jobq doctor` run as a user runs it: exit 0 when all is well, 1 when something needs
attention (with the findings on stdout) or when the database cannot be read (one
``error:`` line on stderr, nothing on stdout, no credential shown).

Each check caused for real is in tests/integration/test_doctor*.py; here, a SQLite
database whose write-ahead log a connection of the test's keeps from being emptied.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
import sqlalchemy as sa

from tests.acceptance.test_cli import Cli, cli, failure, sqlite_only

# Doctor reads server-wide state (sessions of the database, replication slots) that
# tests running beside it would change: never in parallel with others.
# The server's statistics of the tables (dead rows, vacuums): a fresh migration each.
pytestmark = [pytest.mark.serial, pytest.mark.fresh_database]

__all__ = ["cli"]  # the fixture, shared with test_cli


@sqlite_only
def test_doctor_exits_0_when_all_is_well_and_1_when_not(cli: Cli, db_url: str) -> None:
    healthy, healthy_json = cli.many(db_url, [["doctor"], ["doctor", "--json"]])
    assert (healthy.returncode, healthy.stderr) == (0, ""), healthy.stderr
    assert healthy.stdout.splitlines()[-1] == "All 2 checks OK."
    assert (healthy_json.returncode, healthy_json.stderr) == (0, "")
    assert healthy_json.stdout.isascii()
    document = json.loads(healthy_json.stdout)
    assert (document["ok"], document["checks"]) == (True, ["wal_size", "free_pages"])

    # A connection that has written and stays open keeps the log's frames in the file.
    path = sa.make_url(db_url).database
    assert path is not None
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("UPDATE jobq_alembic_version SET version_num = version_num")
        sick, sick_json = cli.many(
            db_url, [["doctor", "--max-wal-size", "0"], ["doctor", "--json", "--max-wal-size", "0"]]
        )
    finally:
        holder.close()
    assert (sick.returncode, sick.stderr) == (1, ""), (sick.stdout, sick.stderr)
    lines = sick.stdout.splitlines()
    assert lines[2].startswith("ATTENTION  wal_size    a write-ahead log over 0 bytes: ")
    assert lines[3].startswith("OK         free_pages  ")
    assert f"ATTENTION  wal_size: file {path}-wal" in lines
    assert any(line.startswith("  What to do: Find the process") for line in lines)
    assert lines[-1] == "1 finding needs attention."
    assert sick_json.returncode == 1
    document = json.loads(sick_json.stdout)
    assert document["ok"] is False
    wal = [finding for finding in document["findings"] if not finding["ok"]]
    assert [(f["check"], f["unit"], f["threshold"]) for f in wal] == [("wal_size", "bytes", 0)]
    assert wal[0]["value"] > 0 and wal[0]["advice"]


def test_doctor_of_a_database_it_cannot_read(cli: Cli) -> None:
    unreachable, missing_file = cli.many(
        None,
        [
            ["doctor", "--database-url", "postgresql://u:s3cr3t-pw@127.0.0.1:1/x"],
            ["doctor", "--json", "--database-url", "sqlite:///nowhere.db"],
        ],
    )
    line = failure(unreachable)
    assert line.startswith("error: Cannot connect to database 'x' on 127.0.0.1:1"), line
    assert "s3cr3t" not in unreachable.stderr
    assert failure(missing_file).startswith("error: Database file ")
    assert not (cli.cwd / "nowhere.db").exists()


@sqlite_only
def test_doctor_refuses_a_threshold_that_is_not_one(cli: Cli, db_url: str) -> None:
    done = cli(db_url, "doctor", "--max-dead-ratio", "1.5")
    assert done.returncode == 2 and "Invalid value for '--max-dead-ratio'" in done.stderr

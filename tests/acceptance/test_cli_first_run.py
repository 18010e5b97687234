"""A command that only reads never creates a database, as a user first runs them.

Connecting to a SQLite file that does not exist creates it, empty: `jobq status` in an
empty directory, or on a mistyped --database-url, used to leave that file behind. The
commands run in subprocesses (`python -m jobq.cli`), several at once.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import sqlalchemy as sa

import jobq
from jobq.engine.database import Database
from tests.acceptance.test_cli import UNREACHABLE, Cli, Done, failure

#: Every command that only reads, with what it prints on a fresh database.
READING: list[tuple[list[str], str]] = [
    (["status"], "no tasks\n\nno workers\n"),
    (["list"], "no tasks\n"),
    (["cron", "list"], "no schedules\n"),
    (["limits", "show"], "no limits\n"),
    (["locks", "list"], "no locks\n"),
]
#: And one that fails on a fresh database, for want of the task it reads.
SHOW = ["show", "1"]
COMMANDS = [args for args, _ in READING] + [SHOW]


def not_found(path: Path) -> str:
    """The one line a reading command prints when ``path`` does not exist."""
    return (
        f"error: Database file {str(path)!r} does not exist; check its URL, "
        "or run `jobq migrate` to create it."
    )


def succeeded(done: Done) -> str:
    """The output of a command that worked: status 0, nothing on stderr."""
    assert (done.returncode, done.stderr) == (0, ""), (done.args, done.stdout, done.stderr)
    return done.stdout


def files_in(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def test_reading_commands_in_an_empty_directory_create_no_database(
    cli: Cli, tmp_path: Path
) -> None:
    """The default sqlite:///jobq.db, in a directory where no jobq ran yet."""
    for args, done in zip(COMMANDS, cli.many(None, COMMANDS), strict=True):
        assert failure(done) == not_found(tmp_path.resolve() / "jobq.db"), args
    assert files_in(tmp_path) == []


def test_a_mistyped_url_names_the_missing_file_and_creates_nothing(
    cli: Cli, tmp_path: Path
) -> None:
    assert cli(None, "migrate").returncode == 0
    before = files_in(tmp_path)
    for url, path in [
        ("sqlite:///typo.db", tmp_path.resolve() / "typo.db"),
        (f"sqlite:///{tmp_path / 'sub' / 'typo.db'}", tmp_path / "sub" / "typo.db"),
        # A SQLite URI (?uri=true) names its file too, percent-encoded.
        ("sqlite:///file:ty%20po.db?uri=true", tmp_path.resolve() / "ty po.db"),
        ("sqlite:///file:typo.db?mode=ro&uri=true", tmp_path.resolve() / "typo.db"),
    ]:
        for args, done in zip(COMMANDS, cli.many(url, COMMANDS), strict=True):
            assert failure(done) == not_found(path), (url, args)
    assert files_in(tmp_path) == before


def test_the_url_from_jobq_database_url_is_refused_alike(cli: Cli, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.db"
    env = {"JOBQ_DATABASE_URL": f"sqlite:///{missing}"}
    assert failure(cli(None, "status", env=env)) == not_found(missing)
    assert files_in(tmp_path) == []


def test_after_jobq_migrate_every_reading_command_works(cli: Cli, tmp_path: Path) -> None:
    """Writing commands create the file as before; the reading ones then read it."""
    migrated = cli(None, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert (tmp_path / "jobq.db").exists()
    outcomes = cli.many(None, COMMANDS)
    for (args, printed), done in zip(READING, outcomes[:-1], strict=True):
        assert succeeded(done) == printed, args
    assert failure(outcomes[-1]) == "error: no task with id 1"


#: Commands that write, but only to a migrated database: none of them creates the file.
APP = ["--app", "tests.apps.defined:app"]
WRITING = [
    ["enqueue", "a"],
    ["enqueue", "nap", "--kwargs", '{"seconds": 1}', *APP],
    ["worker", "--burst", *APP],
]


def test_writing_commands_before_jobq_migrate_create_no_database(cli: Cli, tmp_path: Path) -> None:
    """Only `jobq migrate` creates the file: a worker or an enqueue run before it says to
    run it, and leaves nothing behind (as the reading commands do)."""
    for url, path in [
        ("sqlite:///new.db", tmp_path.resolve() / "new.db"),
        (None, tmp_path.resolve() / "jobq.db"),
        ("sqlite:///file:new.db?uri=true", tmp_path.resolve() / "new.db"),
    ]:
        for args, done in zip(WRITING, cli.many(url, WRITING), strict=True):
            assert failure(done) == not_found(path), (url, args)
        assert files_in(tmp_path) == [], url
    assert cli("sqlite:///new.db", "migrate").returncode == 0
    written = cli("sqlite:///new.db", "enqueue", "a")
    assert written.returncode == 0 and written.stdout == "1\n", written.stderr
    assert "new.db" in files_in(tmp_path)


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://",
        "sqlite:///:memory:",
        "sqlite:///file::memory:?uri=true",
        "sqlite:///file:/shared?vfs=memdb&uri=true",
        "sqlite:///file:/shared?mode=memory&cache=shared&uri=true",
        UNREACHABLE,  # a server's database is never created by connecting: not checked
    ],
)
# SQLAlchemy warns that it will pick another pool for ?mode=memory: no connection is made.
@pytest.mark.filterwarnings("ignore:Selection of the SingletonThreadPool")
def test_databases_that_no_connection_creates_are_never_missing(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    database = Database(url)
    try:
        database.require_existing()
    finally:
        database.dispose()
    assert files_in(tmp_path) == []


def test_require_existing_raises_database_not_found(tmp_path: Path) -> None:
    database = Database(f"sqlite:///{tmp_path / 'gone.db'}")
    with pytest.raises(jobq.DatabaseNotFound, match=r"gone\.db' does not exist"):
        database.require_existing()
    database.dispose()
    assert not os.path.exists(tmp_path / "gone.db")


def test_a_store_before_migrate_raises_database_not_found_and_creates_nothing(
    tmp_path: Path,
) -> None:
    """The library alike: only Store.migrate creates the file."""
    store = jobq.Store(f"sqlite:///{tmp_path / 'early.db'}")
    try:
        with pytest.raises(jobq.DatabaseNotFound, match=r"early\.db' does not exist"):
            store.enqueue("a", {})
        assert files_in(tmp_path) == []
        store.migrate()
        assert store.enqueue("a", {}) == 1
    finally:
        store.dispose()


def test_an_applications_own_engine_still_creates_its_file(tmp_path: Path) -> None:
    """An engine the application passed in is its own: jobq does not stop it creating its
    SQLite file (it may create its own tables there before jobq's)."""
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'app.db'}")
    store = jobq.Store(engine)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE accounts (id INTEGER PRIMARY KEY)"))
        assert "app.db" in files_in(tmp_path)
        store.migrate()
        assert store.enqueue("a", {}) == 1
    finally:
        store.dispose()
        engine.dispose()

"""No jobq command prints any piece of the credentials in its database URL.

Every command that takes --database-url runs with a secret in the URL's password (raw
'@', ':', '/' and '%' in it, which SQLAlchemy splits at the first '@', so that the tail
becomes the host), in the query (?password=), and in both; against a server that is
not there, one that is (migrate succeeds) and one that refuses the password. Neither
the secret nor any four characters of it may appear in stdout or stderr.

The commands run in process (click's CliRunner) for speed, bar `jobq worker`, which
configures logging for its whole process, and one real `jobq migrate` per URL.
"""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import click
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from jobq.cli import common, main

ROOT = Path(__file__).resolve().parents[2]

#: Runs of five letters and digits between the characters that upset URL parsing, so
#: that any four characters shown of it, however escaped, are found.
PASSWORD = "Qz7Kw@Rt5Yv:Hm4Jp/Xc2Nb%Lg8Df"
#: The password's tail past a raw '@' parses as host and database, not as a bad port.
PARSEABLE_PASSWORD = "Qz7Kw@Rt5Yv/Xc2Nb%Lg8Df:Hm4Jp"
QUERY_SECRET = "Pw3Ls9Tq6Vz2"
SECRETS = (PASSWORD, PARSEABLE_PASSWORD, QUERY_SECRET)

#: Each command that takes --database-url, with arguments that let it reach the database.
COMMANDS: dict[str, list[str]] = {
    "migrate": [],
    "enqueue": ["t"],
    "status": [],
    "list": [],
    "show": ["1"],
    "retry": ["1"],
    "cancel": ["1"],
    "purge": ["q", "--yes"],
    "result": ["1", "--timeout", "0"],
    "why": ["1"],
    "workflow show": ["1"],
    "prune": ["--older-than", "1d"],
    "worker": ["--app", "tests.apps.mixed:app", "--burst"],
    "locks list": [],
    "locks release": ["x"],
    "locks purge": [],
    "cron list": [],
    "cron run": ["x"],
    "cron disable": ["x"],
    "cron enable": ["x"],
    "limits set": ["q", "--concurrency", "1"],
    "limits show": [],
    "limits clear": ["q"],
    "workers": [],
    "queues list": [],
    "queues pause": ["q"],
    "queues fair": ["q"],
    "queues unfair": ["q"],
    "queues resume": ["q"],
    "queues retain": ["q", "1d"],
    # Both serve until stopped; --check stops after reaching the database.
    "metrics": ["--port", "9", "--check"],
    "dashboard": ["--check"],
    "doctor": [],
}


@pytest.fixture(autouse=True)
def brief_patience(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reading commands run here in process give up on a database they cannot reach
    (or that refuses the password) after 0.2 s instead of READ_PATIENCE's 5: what they
    print is the same, and test_cli_outage.py tests the patience itself. Twenty-odd
    commands a URL otherwise waited 5 s each, a minute a URL. `jobq enqueue` waits 0.2 s
    too ($JOBQ_ENQUEUE_WAIT; test_enqueue_waits.py tests the wait)."""
    monkeypatch.setattr(common, "READ_PATIENCE", 0.2)
    monkeypatch.setenv("JOBQ_ENQUEUE_WAIT", "0.2")


def commands_with_a_database_url(group: click.Group, path: str = "") -> Iterator[str]:
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from commands_with_a_database_url(command, f"{path}{name} ")
        elif any(param.name == "database_url" for param in command.params):
            yield f"{path}{name}"


def test_every_command_with_a_database_url_is_checked() -> None:
    assert set(commands_with_a_database_url(main)) == set(COMMANDS)


def pieces(secret: str) -> set[str]:
    """Every four characters of ``secret``, as written and as escaped in a URL."""
    return {
        form[i : i + 4] for form in (secret, quote(secret, safe="")) for i in range(len(form) - 3)
    }


def assert_nothing_shows(*texts: str) -> None:
    for secret in SECRETS:
        for text in texts:
            shown = sorted(piece for piece in pieces(secret) if piece in text)
            assert not shown, (shown, text)


def with_secrets(url: str) -> list[str]:
    """``url`` with the secrets in its password, its query, and both (escaped, so that a
    server on ``url`` is reached)."""
    parsed = sa.make_url(url)
    in_password = parsed.set(username=parsed.username or "root", password=PASSWORD)
    in_query = parsed.update_query_dict({"password": QUERY_SECRET})
    both = in_password.update_query_dict({"password": QUERY_SECRET})
    return [u.render_as_string(hide_password=False) for u in (in_password, in_query, both)]


def raw(password: str, host: str, query: str = "") -> list[str]:
    """URLs of ``host`` (unescaped ``password``) for PostgreSQL and MySQL."""
    return [
        f"{scheme}://root:{password}@{host}/x{query}"
        for scheme in ("postgresql+psycopg", "mysql+pymysql")
    ]


UNREACHABLE = [
    *raw(PASSWORD, "127.0.0.1:5999"),
    *raw(PARSEABLE_PASSWORD, "127.0.0.1:5999"),
    *raw("Qz7Kw@Rt5Yv", "127.0.0.1:5999"),  # the tail becomes the host name
    *raw(quote(PASSWORD, safe=""), "127.0.0.1:5999", f"?password={QUERY_SECRET}"),
    *raw(PARSEABLE_PASSWORD, "127.0.0.1:5999", f"?password={QUERY_SECRET}"),
    f"postgresql://root@127.0.0.1:5999/x?sslpassword={QUERY_SECRET}&password={QUERY_SECRET}",
    f"sqlite://root:{PASSWORD}@/x.db",
]


def run_in_process(commands: Sequence[str], url: str) -> None:
    """Each command (but the worker) on ``url`` through CliRunner: nothing shows."""
    for command in commands:
        if command == "worker":
            continue
        args = [*command.split(), *COMMANDS[command], "--database-url", url]
        result = CliRunner().invoke(main, args, catch_exceptions=True)
        error = result.exception
        if error is not None and not isinstance(error, SystemExit):
            pytest.fail(f"jobq {args!r} raised:\n{''.join(traceback.format_exception(error))}")
        assert result.exit_code in (0, 1), (args, result.output)
        assert_nothing_shows(result.stdout, result.stderr)


def run_processes(commands: Sequence[Sequence[str]], cwd: Path) -> list[tuple[str, str]]:
    """Each ``jobq`` command line in a subprocess, several at a time: (stdout, stderr)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("JOBQ_DATABASE_URL", None)

    def run(args: Sequence[str]) -> tuple[str, str]:
        done = subprocess.run(
            [sys.executable, "-m", "jobq.cli", *args],
            cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode in (0, 1), (args, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        return done.stdout, done.stderr

    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(run, commands))


def real_commands(urls: Sequence[str]) -> list[list[str]]:
    """`jobq migrate` and `jobq worker --burst` on each URL, as a shell runs them."""
    return [
        [*command.split(), *COMMANDS[command], "--database-url", url]
        for url in urls
        for command in ("migrate", "worker")
    ]


@pytest.mark.parametrize("url", UNREACHABLE)
def test_no_command_shows_a_secret_of_an_unreachable_database(url: str, tmp_path: Path) -> None:
    run_in_process(list(COMMANDS), url)
    for out, err in run_processes(real_commands([url]), tmp_path):
        assert_nothing_shows(out, err)


def test_no_command_shows_a_secret_of_a_reachable_database(
    empty_url: str, backend: str, tmp_path: Path
) -> None:
    """PostgreSQL lets root in with any password (trust), so every command runs there;
    MariaDB's root has none, so it refuses them; SQLite ignores ?password=."""
    urls = with_secrets(empty_url)
    if backend == "sqlite":
        urls = [sa.make_url(empty_url).update_query_dict({"password": QUERY_SECRET})]
        urls = [url.render_as_string(hide_password=False) for url in urls]
        urls.append(f"sqlite://root:{quote(PASSWORD, safe='')}@/x.db")  # a bad SQLite URL
    outcomes = run_processes(real_commands(urls), tmp_path)
    for out, err in outcomes:
        assert_nothing_shows(out, err)
    if backend != "mysql":
        assert outcomes[0][0].startswith("migrated "), outcomes[0]
    for url in urls:
        run_in_process(list(COMMANDS), url)

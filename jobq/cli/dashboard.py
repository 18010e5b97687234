"""`jobq dashboard`: serve the web dashboard (extra jobq[web]) until stopped."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import click

from jobq.cli.common import database_url_option, store_for
from jobq.db.errors import MissingExtra

#: The Host headers a dashboard without a token answers: a page of another site whose
#: name was made to point at 127.0.0.1 (DNS rebinding) is refused.
LOOPBACK_NAMES = ["127.0.0.1", "localhost", "*.localhost"]


def is_loopback(host: str) -> bool:
    """Whether listening on ``host`` reaches this machine only."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@click.command("dashboard")
@click.option(
    "--host", default="127.0.0.1", show_default=True,
    help="The address to listen on; any but a loopback one needs --token.",
)  # fmt: skip
@click.option(
    "--port", type=click.IntRange(min=1, max=65535), default=8080, show_default=True,
    help="The port to listen on.",
)  # fmt: skip
@click.option(
    "--read-only", is_flag=True,
    help="Show everything, change nothing: no buttons, and every action is refused (403).",
)  # fmt: skip
@click.option(
    "--token", envvar="JOBQ_DASHBOARD_TOKEN", default=None, metavar="TOKEN",
    help="Ask every request for TOKEN: browsers through a sign-in form, scripts as "
    "'Authorization: Bearer TOKEN'. Prefer --token-file or the environment variable "
    "JOBQ_DASHBOARD_TOKEN: a --token on the command line is visible to anyone running ps.",
)  # fmt: skip
@click.option(
    "--token-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="Read the token from this file (its first line), instead of --token.",
)  # fmt: skip
@click.option(
    "--trusted-proxy", "trusted_proxies", multiple=True, metavar="ADDRESS",
    help="A reverse proxy (address or network, repeatable) whose X-Forwarded-For and "
    "X-Forwarded-Proto are believed: who the client is (wrong tokens are counted per "
    "client) and whether it used HTTPS (the session cookie is then Secure).",
)  # fmt: skip
@click.option(
    "--check", is_flag=True,
    help="Check the options and the database (reachable, migrated), then exit without serving.",
)  # fmt: skip
@database_url_option
def dashboard(
    host: str,
    port: int,
    read_only: bool,
    token: str | None,
    token_file: Path | None,
    trusted_proxies: tuple[str, ...],
    check: bool,
    database_url: str,
) -> None:
    """Serve the web dashboard: queues, tasks, cron schedules, locks and workers, with
    retry, cancel, pause and the other operators' actions (needs the 'web' extra).

    Without a token (--token-file, JOBQ_DASHBOARD_TOKEN or --token) it serves a loopback
    address only (127.0.0.1 by default), and anyone who can reach it may use it. Pages
    refresh themselves every few seconds.
    SIGTERM or SIGINT (Ctrl-C) stops it.
    """
    if token_file is not None:
        if token:
            raise click.UsageError("give the token once: --token-file, or --token (or its env var)")
        token = read_token_file(token_file)
    token = token or None
    for proxy in trusted_proxies:
        try:
            ipaddress.ip_network(proxy.strip(), strict=False)
        except ValueError:
            raise click.BadParameter(
                f"{proxy!r} is not an IP address or network (such as 10.0.0.0/8)",
                param_hint="--trusted-proxy",
            ) from None
    if token is None and not is_loopback(host):
        raise click.UsageError(
            f"--host {host} is not a loopback address: set --token-file (or "
            "JOBQ_DASHBOARD_TOKEN, or --token) "
            "so that not everyone who reaches it can use the dashboard"
        )
    with store_for(database_url, read_only=True, serves=True) as store:
        from jobq.web import create_app  # MissingExtra without jobq[web]: said, exit 1

        try:
            import uvicorn
        except ImportError:
            raise MissingExtra(feature="jobq dashboard", extra="web") from None

        store.check_schema()
        shown = f"[{host}]" if ":" in host else host
        if check:
            click.echo(f"the database is ready; jobq dashboard would serve http://{shown}:{port}/")
            return
        app = create_app(
            store,
            read_only=read_only,
            token=token,
            allowed_hosts=LOOPBACK_NAMES if token is None else None,
            trusted_proxies=trusted_proxies,
        )
        click.echo(f"jobq dashboard at http://{shown}:{port}/ (Ctrl-C stops it)", err=True)
        # The app reads X-Forwarded-* itself, from --trusted-proxy peers only.
        uvicorn.run(app, host=host, port=port, log_level="warning", proxy_headers=False)


def read_token_file(path: Path) -> str:
    """The token in ``path``: its first line, without surrounding blanks; a clear error
    for a file that cannot be read or holds none."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "it is not UTF-8 text"
        raise click.BadParameter(
            f"cannot read {path}: {reason}", param_hint="--token-file"
        ) from None
    lines = text.splitlines()
    token = lines[0].strip() if lines else ""
    if not token:
        raise click.BadParameter(
            f"{path} holds no token (its first line is blank)", param_hint="--token-file"
        )
    return token

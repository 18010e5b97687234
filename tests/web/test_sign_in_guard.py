"""Sessions that signing out ends, wrong tokens slowed down per client (as trusted proxies
name it), Secure cookies over HTTPS, and `jobq dashboard --token-file`."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

import jobq
from jobq.cli.dashboard import dashboard
from jobq.web import create_app
from jobq.web.auth import COOKIE
from jobq.web.guard import FREE_FAILURES, Throttle
from tests.web.test_auth import TOKEN, sign_in
from tests.web.test_cli import serving

JSON = {"accept": "application/json"}
PROXY = "10.0.0.1"


@contextmanager
def dashboard_app(store: jobq.Store, **options: Any) -> Iterator[Any]:
    """A dashboard of ``store`` asking for TOKEN, its counting stopped after."""
    app = create_app(store, token=TOKEN, **options)
    try:
        yield app
    finally:
        app.state.counts.stop()


def client(
    app: Any, address: str = "192.0.2.10", headers: dict[str, str] | None = None, **options: Any
) -> TestClient:
    """A client of ``app`` from ``address``, asking for pages, sending ``headers`` too."""
    every = {"accept": "text/html", **(headers or {})}
    return TestClient(app, headers=every, client=(address, 40000), **options)


def test_a_cookie_copied_before_sign_out_is_refused_after_it(store: jobq.Store) -> None:
    with dashboard_app(store) as app, client(app) as browser, client(app) as thief:
        assert sign_in(browser).status_code == 303  # type: ignore[attr-defined]
        copied = browser.cookies[COOKIE]
        thief.cookies.set(COOKIE, copied)
        assert thief.get("/tasks", headers=JSON).status_code == 200
        csrf = browser.get("/").text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        answer = browser.post("/logout", data={"csrf": csrf}, follow_redirects=False)
        assert answer.status_code == 303
        assert thief.get("/tasks", headers=JSON).status_code == 401
        assert thief.get("/tasks", follow_redirects=False).status_code == 303  # to /login
        # Signing in again makes a new session; the old cookie stays dead.
        assert sign_in(browser).status_code == 303  # type: ignore[attr-defined]
        assert browser.get("/tasks", headers=JSON).status_code == 200
        thief.cookies.set(COOKIE, copied)
        assert thief.get("/tasks", headers=JSON).status_code == 401


def test_wrong_bearer_tokens_are_slowed_down_per_client(
    store: jobq.Store, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = {"authorization": "Bearer guess-123", **JSON}
    right = {"authorization": f"Bearer {TOKEN}", **JSON}
    slow = Throttle(free=FREE_FAILURES, first_wait=120.0)  # no test waits that long
    caplog.set_level(logging.WARNING, logger="jobq.dashboard")
    with dashboard_app(store, throttle=slow) as app, client(app) as guesser:
        for _ in range(FREE_FAILURES + 1):  # the last one shuts the client out
            assert guesser.get("/tasks", headers=wrong).status_code == 401
        for headers in (wrong, right):  # neither is checked while it waits
            refused = guesser.get("/tasks", headers=headers)
            assert refused.status_code == 429
            assert 100 <= int(refused.headers["retry-after"]) <= 120
        with client(app, "192.0.2.11") as other:  # another client is not slowed
            assert other.get("/tasks", headers=right).status_code == 200
    failures = [r.getMessage() for r in caplog.records if "wrong token" in r.getMessage()]
    assert len(failures) == FREE_FAILURES + 1
    assert all("192.0.2.10" in line and "guess-123" not in line for line in failures)
    assert "waits 120 s" in failures[-1]


def test_wrong_sign_ins_are_slowed_down_too(store: jobq.Store) -> None:
    slow = Throttle(free=2, first_wait=120.0)
    with dashboard_app(store, throttle=slow) as app, client(app) as guesser:
        for _ in range(3):
            assert sign_in(guesser, token="guess").status_code == 401  # type: ignore[attr-defined]
        refused = sign_in(guesser)  # the right token, not checked while it waits
        assert refused.status_code == 429  # type: ignore[attr-defined]
        assert 'id="login-error"' in refused.text and "try again in" in refused.text  # type: ignore[attr-defined]
        assert guesser.get("/tasks", headers=JSON).status_code == 401


def test_the_default_throttle_lets_a_few_wrong_tokens_pass_then_refuses(
    store: jobq.Store,
) -> None:
    wrong = {"authorization": "Bearer guess", **JSON}
    with dashboard_app(store) as app, client(app) as guesser:
        answers = [guesser.get("/", headers=wrong).status_code for _ in range(FREE_FAILURES)]
        assert answers == [401] * FREE_FAILURES
        # Each further one waits longer (1 s, 2 s, 4 s ...): refusals come at once.
        answers = [guesser.get("/", headers=wrong).status_code for _ in range(12)]
        assert 429 in answers


def test_a_trusted_proxy_names_the_client_and_no_one_else_may(store: jobq.Store) -> None:
    wrong = {"authorization": "Bearer guess", **JSON}
    right = {"authorization": f"Bearer {TOKEN}", **JSON}
    slow = Throttle(free=0, first_wait=120.0)

    def forwarded(address: str) -> dict[str, str]:
        return {"x-forwarded-for": f"198.51.100.7, {address}"}

    with dashboard_app(store, trusted_proxies=[PROXY], throttle=slow) as app:
        with client(app, PROXY) as proxy:
            guess = proxy.get("/", headers={**wrong, **forwarded("203.0.113.5")})
            assert guess.status_code == 401
            shut = proxy.get("/", headers={**right, **forwarded("203.0.113.5")})
            assert shut.status_code == 429
            # Another client behind the same proxy is let in.
            other = proxy.get("/", headers={**right, **forwarded("203.0.113.6")})
            assert other.status_code == 200
        with client(app, "192.0.2.99") as spoofer:  # not a trusted proxy: its header is ignored
            guess = spoofer.get("/", headers={**wrong, **forwarded("203.0.113.8")})
            assert guess.status_code == 401
            again = spoofer.get("/", headers={**right, **forwarded("203.0.113.9")})
            assert again.status_code == 429


def set_cookie_of(answer: Any) -> str:
    cookies = [v for k, v in answer.headers.multi_items() if k == "set-cookie"]
    [cookie] = [c for c in cookies if c.startswith(f"{COOKIE}=")]
    return str(cookie).lower()


def test_the_cookie_is_secure_over_https(store: jobq.Store) -> None:
    with dashboard_app(store, trusted_proxies=[PROXY]) as app:
        with client(app, base_url="https://testserver") as direct:
            assert "; secure" in set_cookie_of(sign_in(direct))
        with client(app) as plain:
            assert "secure" not in set_cookie_of(sign_in(plain))
        with client(app, PROXY, headers={"x-forwarded-proto": "https"}) as proxied:
            assert "; secure" in set_cookie_of(sign_in(proxied))
        with client(app, "192.0.2.99", headers={"x-forwarded-proto": "https"}) as spoofed:
            assert "secure" not in set_cookie_of(sign_in(spoofed))


def test_a_bad_trusted_proxy_is_a_clear_error(store: jobq.Store) -> None:
    with pytest.raises(ValueError, match=r"'10\.0\.0\.300' is not an IP address or network"):
        create_app(store, trusted_proxies=["10.0.0.300"])
    result = CliRunner().invoke(dashboard, ["--trusted-proxy", "proxy.local", "--check"])
    assert result.exit_code == 2 and "'proxy.local' is not an IP address" in result.output


def test_the_token_file(tmp_path: Path, sqlite_url: str) -> None:
    secret = tmp_path / "token"
    secret.write_text(f"{TOKEN}\n")
    with serving("--database-url", sqlite_url, "--token-file", str(secret)) as base:
        assert httpx.get(f"{base}/tasks").status_code == 401
        page = httpx.get(f"{base}/tasks", headers={"authorization": f"Bearer {TOKEN}"})
        assert page.status_code == 200 and "hello.task" in page.text
    both = CliRunner().invoke(
        dashboard, ["--token", "x", "--token-file", str(secret), "--check",
                    "--database-url", sqlite_url],
    )  # fmt: skip
    assert both.exit_code == 2 and "give the token once" in both.output
    (tmp_path / "blank").write_text("\n")
    for path, problem in [(tmp_path / "blank", "holds no token"),
                          (tmp_path / "missing", "cannot read")]:  # fmt: skip
        result = CliRunner().invoke(
            dashboard, ["--token-file", str(path), "--check", "--database-url", sqlite_url]
        )
        assert result.exit_code == 2 and problem in result.output, result.output
    helped = CliRunner().invoke(dashboard, ["--help"])
    assert "Prefer --token-file" in helped.output and "ps" in helped.output

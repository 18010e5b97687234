"""safe_url and scrub: a URL or a driver's message shown to people holds no piece of the
URL's credentials, wherever they were in it. No database."""

from __future__ import annotations

from urllib.parse import quote

import pytest
import sqlalchemy as sa
from hypothesis import example, given
from hypothesis import strategies as st

from jobq.db.urls import safe_url, scrub


def pieces(secret: str) -> set[str]:
    """Every four characters of ``secret``, as written and as escaped in a URL."""
    forms = {secret, quote(secret, safe="")}
    return {form[i : i + 4] for form in forms for i in range(len(form) - 3)}


def shown_pieces(secret: str, text: str, rest: str = "") -> list[str]:
    """The pieces of ``secret`` in ``text``, bar those the rest of the URL holds anyway."""
    return sorted(piece for piece in pieces(secret) if piece in text and piece not in rest)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:pw@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        ("postgresql://h/db", "postgresql://h/db"),
        ("sqlite:///jobq.db", "sqlite:///jobq.db"),
        ("sqlite:////tmp/a@b/jobq.db", "sqlite:////tmp/a%40b/jobq.db"),  # no credentials
        ("postgresql://u:p%40ss@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u:p/w:x?y#z@h/db", "postgresql://u:***@h/db"),
        ("postgresql://root:S3c@retPW9@127.0.0.1:5999/x", "postgresql://root:***@127.0.0.1:5999/x"),
        ("postgresql://root:S3c@re/tPW9@h:1/x", "postgresql://root:***@h:1/x"),
        ("postgresql://root:S3c@retPW9?x@h/x", "postgresql://root:***@h/x"),
        ("postgresql://root:S3c@ret:PW9@h:5/x", "postgresql://root:***@h:5/x"),  # no parse
        ("postgresql://u:pw@127.0.0.1:notaport/x", "postgresql://u:***@127.0.0.1:notaport/x"),
        ("not a url", "not a url"),
        ("postgresql://u@h/db?password=Kw8Mn2Pz", "postgresql://u@h/db?password=***"),
        ("mysql://u@h/db?passwd=Zq9Vx3&charset=utf8", "mysql://u@h/db?charset=utf8&passwd=***"),
        ("postgresql://h/db?sslpassword=Zq9Vx3&sslmode=require", None),
        ("postgresql://h/db?api_key=Zq9Vx3&auth_token=T0ken&client_secret=Zq9Vx3", None),
        ("postgresql://h/db?pwd=Zq9Vx3&Password=Zq9Vx3&access_key=Zq9Vx3", None),
        ("postgresql://u:a@b@h/db?password=S3c&ret&sslmode=require", None),
    ],
)
def test_safe_url_masks_every_credential(url: str, shown: str | None) -> None:
    text = safe_url(url)
    if shown is not None:
        assert text == shown
    for secret in ("Kw8Mn2Pz", "Zq9Vx3", "T0ken", "retPW9", "tPW9", "S3c&ret", "p%40ss", "p/w:x"):
        assert not shown_pieces(secret, text), text
    assert "pw@" not in text and "a@b" not in text


def test_safe_url_of_a_parsed_url_masks_the_tail_of_a_password_with_a_raw_at() -> None:
    """SQLAlchemy reads 'S3c@retPW9@h' as password 'S3c' and host 'retPW9@h'."""
    for url in ("postgresql://root:S3c@retPW9@h:1/x", "postgresql://root:S3c@re/tPW9@h/x"):
        parsed = sa.make_url(url)
        assert "@" in f"{parsed.host}{parsed.database}"
        text = safe_url(parsed)
        assert text.startswith("postgresql://root:***@h"), text
        assert "PW9" not in text


def test_scrub_masks_credentials_a_driver_echoes() -> None:
    url = "postgresql://root:S3c@retPW9@127.0.0.1:5999/x?sslpassword=T0kenValue"
    message = "failed to resolve host 'retPW9@127.0.0.1': password S3c@retPW9, key T0kenValue"
    assert scrub(message, url) == "failed to resolve host '***@127.0.0.1': password ***, key ***"
    assert scrub(message, sa.make_url(url)).count("***") == 3
    encoded = "postgresql://root:S3c%40retPW9@h/x"
    assert scrub("bad password S3c@retPW9 (S3c%40retPW9)", encoded) == "bad password *** (***)"
    assert scrub("connection refused", "postgresql://u:pw@h/x") == "connection refused"


def test_text_that_is_not_unicode_is_shown_without_its_credentials() -> None:
    """A lone surrogate (undecodable bytes on the command line) is no reason to fail."""
    assert safe_url("sqlite:///\udcff.db") == "sqlite:///\udcff.db"
    url = "postgresql://u:S3c\udcffret@h/x?password=T0k\ud800en"
    assert safe_url(url) == "postgresql://u:***@h/x?password=***"
    assert safe_url(sa.make_url(url)) == "postgresql://***"
    assert scrub("S3c\udcffret, T0k\ud800en", url) == "***, ***"


# --- any password, anywhere -------------------------------------------------------------

schemes = st.sampled_from(["postgresql", "postgresql+psycopg", "mysql+pymysql", "mariadb"])
hosts = st.sampled_from(["127.0.0.1", "db.example.org", "[::1]", "localhost"])
ports = st.sampled_from(["", ":5432", ":1"])
names = st.from_regex(r"[a-z][a-z0-9_]{0,7}", fullmatch=True)
passwords = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), min_size=1, max_size=24
)


@given(
    scheme=schemes, user=names, password=passwords, host=hosts, port=ports, database=names,
    place=st.sampled_from(["raw", "escaped", "query", "query and raw", "sslpassword"]),
)  # fmt: skip
@example(
    scheme="postgresql", user="root", password="S3c@retPW9", host="127.0.0.1", port=":5999",
    database="x", place="raw",
)  # fmt: skip
@example(
    scheme="postgresql", user="root", password="S3c@re/tPW9", host="h", port="", database="x",
    place="raw",
)  # fmt: skip
@example(
    scheme="postgresql", user="root", password="S3c@retPW9?x", host="h", port="", database="x",
    place="raw",
)  # fmt: skip
def test_no_piece_of_any_password_is_shown(
    scheme: str, user: str, password: str, host: str, port: str, database: str, place: str
) -> None:
    escaped = quote(password, safe="")
    userinfo = {"raw": f"{user}:{password}", "escaped": f"{user}:{escaped}"}.get(place, user)
    userinfo = f"{user}:{password}" if place == "query and raw" else userinfo
    query = {"query": "?password=", "query and raw": "?password=", "sslpassword": "?sslpassword="}
    tail = f"{query[place]}{escaped}" if place in query else ""
    url = f"{scheme}://{userinfo}@{host}{port}/{database}{tail}"
    rest = f"{scheme}://{user}:***@{host}{port}/{database}?sslpassword=***"
    text = safe_url(url)
    assert not shown_pieces(password, text, rest), (url, text)
    try:
        parsed = sa.make_url(url)
    except (sa.exc.ArgumentError, ValueError):
        return
    if "raw" not in place or "@" not in password:
        # Parsed, a raw '@' may leave no trace (a tail read as a query key without a
        # value is dropped): Database keeps the text it was given for that.
        text = safe_url(parsed)
        assert not shown_pieces(password, text, rest), (url, text)
    # What a driver may echo: the host and database it was given, and the password.
    # (On lines of their own: no password holds a newline, so no piece spans two.)
    message = "\n".join([parsed.host or "", parsed.database or "", password])
    assert not shown_pieces(password, scrub(message, url), rest), (url, message)

"""Database URLs: parsed with a clear error, and shown to people without any credential.

Every message that names a database (errors, `jobq migrate`'s report, reprs) renders its
URL with safe_url and a driver's message with scrub.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

import sqlalchemy as sa

from jobq.db.errors import InvalidDatabaseURL
from jobq.db.validation import is_unicode

#: Query parameters whose values are credentials, by a piece of their names: password,
#: passwd, sslpassword, pwd, secret, token, api_key, ...
_CREDENTIAL_NAME = re.compile(r"pass|pwd|secret|token|key|credential", re.IGNORECASE)
#: A query parameter: separator, name, value. The value runs on through any '&' that
#: starts no parameter of its own (a raw '&' in a password), so none of it is left out.
_PARAMETER = re.compile(r"([?&])([^=&?#]*)=((?:[^&]|&(?![^=&?]*=))*)")
#: What splits a credential into the pieces that messages may show apart.
_PIECES = re.compile(r"[@/?#:&]")
#: Credentials shorter than this are not scrubbed from messages: replacing one or two
#: characters wherever they occur would garble the message, and hides nothing worth it.
_SHORTEST_SCRUBBED = 3


def parse_url(url: str | sa.URL) -> sa.URL:
    """``url`` parsed, or InvalidDatabaseURL."""
    # Drivers fail on either when they connect, with messages that do not name the URL.
    if isinstance(url, str) and "\x00" in url:
        raise InvalidDatabaseURL(url=safe_url(url), reason="it contains a NUL character")
    if isinstance(url, str) and not is_unicode(url):
        raise InvalidDatabaseURL(url=safe_url(url), reason="it is not valid Unicode text")
    try:
        parsed = sa.make_url(url)
    except (sa.exc.ArgumentError, ValueError):  # ValueError: a port that is not a number
        parsed = None
    if parsed is None or parsed.drivername.count("+") > 1:
        raise InvalidDatabaseURL(
            url=safe_url(url), reason="expected dialect://user:password@host:port/database"
        )
    return parsed


#: The query parameter that tells jobq its connections go through a pooler, and which
#: kind: ``jobq_pooler=transaction`` (PgBouncer's pool_mode = transaction, say). jobq
#: takes it out of the URL before the driver sees it.
POOLER_PARAMETER = "jobq_pooler"
#: The poolers jobq knows how to work through.
POOLERS = ("transaction",)


def take_pooler(url: sa.URL, given: str | sa.URL) -> tuple[sa.URL, str | None]:
    """``url`` without its jobq_pooler parameter, and that parameter's value (None: the
    URL is the server's own); InvalidDatabaseURL for a value jobq does not know."""
    pooler = url.query.get(POOLER_PARAMETER)
    if pooler is None:
        return url, None
    if not isinstance(pooler, str) or pooler not in POOLERS:
        raise InvalidDatabaseURL(
            url=safe_url(given),
            reason=f"{POOLER_PARAMETER} must be one of {', '.join(POOLERS)}, not {pooler!r}",
        )
    return url.difference_update_query([POOLER_PARAMETER]), pooler


def safe_url(url: str | sa.URL) -> str:
    """``url`` for people to read: no piece of its credentials, wherever they are in it.

    The password is masked, and so is the value of every query parameter named like a
    credential (?password=, ?sslpassword=, ?token=, ...). Where the text holds more than
    one '@' (a password with an unescaped one, whose tail SQLAlchemy reads as the host or
    the database), all before the last '@' of the authority counts as credentials; so too
    in a URL that does not parse. When in doubt, more is hidden, never less.
    """
    # Query values first, every time: one may hold an '@' that is not the authority's.
    if isinstance(url, sa.URL):
        text = _rendered(url, hide=True)
        if text is None:
            return f"{url.drivername}://***"
        text = _PARAMETER.sub(_masked_parameter, text)
        return _masked_userinfo(unquote(text)) if _spilt(url) else text
    parsed = _parsed(url)
    # One '@' or none: SQLAlchemy read the credentials as they were meant.
    text = _rendered(parsed, hide=True) if parsed is not None and url.count("@") <= 1 else None
    if text is None:
        return _masked_userinfo(_PARAMETER.sub(_masked_parameter, url))
    return _PARAMETER.sub(_masked_parameter, text)


def scrub(text: str, url: str | sa.URL) -> str:
    """``text`` (a driver's error message, say) with every credential in ``url`` masked:
    the password and credential query values, whole, decoded or encoded, and the pieces
    of a password holding raw '@'s (which drivers take for the host, say)."""
    for secret in sorted(_credentials(url), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def _parsed(url: str) -> sa.URL | None:
    try:
        return sa.make_url(url)
    except (sa.exc.ArgumentError, ValueError):  # ValueError: a port that is not a number
        return None


def _rendered(url: sa.URL, *, hide: bool) -> str | None:
    """``url`` as SQLAlchemy writes it, or None if it cannot (text that is not Unicode)."""
    try:
        return url.render_as_string(hide_password=hide)
    except ValueError:  # UnicodeEncodeError: a lone surrogate
        return None


def _spilt(url: sa.URL) -> bool:
    """Whether ``url`` was parsed from text whose password held a raw '@' (its tail is in
    the host, database or query). A tail that SQLAlchemy dropped is not there to find:
    Database keeps the text it was given."""
    if url.username is None and url.password is None:
        return False
    parts = [url.host or "", url.database or ""]
    parts += [f"{name}={value}" for name, value in url.query.items()]
    return any("@" in part for part in parts)


def _userinfo(text: str) -> str | None:
    """All before the last '@' of ``text``'s authority; None where it has no '@'."""
    _, sep, rest = text.partition("://")
    rest = rest if sep else text
    if "@" not in rest or rest.startswith("/"):  # no authority, or one without credentials
        return None
    return rest.rpartition("@")[0]


def _masked_userinfo(text: str) -> str:
    """``text`` with all before the last '@' of its authority masked, bar a plain user name."""
    userinfo = _userinfo(text)
    if userinfo is None:
        return text
    scheme, sep, _ = text.partition("://")
    start = len(scheme + sep) if sep else 0
    user, colon, _ = userinfo.partition(":")
    shown = f"{user}{colon and ':***'}" if _plain(user) else "***"
    return text[:start] + shown + text[start + len(userinfo) :]


def _plain(user: str) -> bool:
    """Whether ``user`` is a plain user name, holding no character a password spilt into."""
    return not any(char in user for char in "@/?#")


def _masked_parameter(match: re.Match[str]) -> str:
    separator, name, value = match.groups()
    return f"{separator}{name}={'***' if _CREDENTIAL_NAME.search(name) else value}"


def _credentials(url: str | sa.URL) -> set[str]:
    """Every credential in ``url``, as a message might spell it."""
    if isinstance(url, sa.URL):
        parsed: sa.URL | None = url
        text = _rendered(url, hide=False) or ""
        ambiguous = _spilt(url)
    else:
        parsed, text = _parsed(url), url
        ambiguous = parsed is None or url.count("@") > 1
    found = {value for _, name, value in _PARAMETER.findall(text) if _CREDENTIAL_NAME.search(name)}
    if parsed is not None and parsed.password:
        found.add(str(parsed.password))
    if ambiguous:  # as safe_url reads it: query values first, then up to the last '@'
        text = _PARAMETER.sub(_masked_parameter, text)
        userinfo = _userinfo(unquote(text) if isinstance(url, sa.URL) else text)
        if userinfo is not None:
            user, colon, password = userinfo.partition(":")
            found.add(password if colon else "" if _plain(user) else userinfo)
    # The pieces a driver may show apart: a spilt password's tail is a host name to it.
    found |= {piece for secret in found for piece in _PIECES.split(secret)}
    spellings = {
        form
        for secret in found
        for form in (secret, unquote(secret), quote(secret, errors="surrogatepass"))
    }
    return {secret for secret in spellings if len(secret) >= _SHORTEST_SCRUBBED}


def shown_url(url: str | sa.URL) -> sa.URL | None:
    """``url`` as safe_url shows it, parsed again: its host and database hold no secret."""
    try:
        return sa.make_url(safe_url(url))
    except (sa.exc.ArgumentError, ValueError):
        return None

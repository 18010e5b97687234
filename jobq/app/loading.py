"""Finding the user's App from ``module:attribute``, and saying where their code failed."""

from __future__ import annotations

import importlib
import os
import sys
import sysconfig
import traceback
from pathlib import Path

from jobq.app import App
from jobq.db.errors import InvalidAppPath

#: Where jobq's own code lives, and the standard library and installed packages: frames
#: there are not the user's code (unless theirs is installed too, see _user_frame).
_JOBQ = Path(__file__).resolve().parents[1]
_INSTALLED = tuple(
    {
        Path(path).resolve()
        for key in ("stdlib", "platstdlib", "purelib", "platlib")
        if (path := sysconfig.get_paths().get(key))
    }
)


def load_app(path: str) -> App:
    """The App at ``module:attribute`` (importable from the current directory too).

    InvalidAppPath when it cannot be loaded: the module is not found, it has no such
    attribute, or that is no App; or importing the module raised (a missing import of
    its own, a bug), which the message names with the file and line of the user's code
    where it happened, without a traceback through jobq's.
    """
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise InvalidAppPath(path=path, reason="expected module:attribute, e.g. myapp.tasks:app")
    if os.getcwd() not in sys.path:
        # Like `python -m`, find the user's modules in the directory the command runs in.
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if _names_the_module(error, module_name):
            reason = f"cannot import {module_name!r}: {error}"
            raise InvalidAppPath(path=path, reason=reason) from None
        raise InvalidAppPath(path=path, reason=_raised(module_name, error)) from None
    except Exception as error:  # whatever the user's module raised as it ran
        raise InvalidAppPath(path=path, reason=_raised(module_name, error)) from None
    app = getattr(module, attribute, None)
    if app is None:
        raise InvalidAppPath(path=path, reason=f"{module_name!r} has no attribute {attribute!r}")
    if not isinstance(app, App):
        raise InvalidAppPath(path=path, reason=f"it is a {type(app).__name__}, not a jobq.App")
    return app


def _names_the_module(error: ModuleNotFoundError, module_name: str) -> bool:
    """Whether ``error`` is about the module asked for (or a package on its way), rather
    than about a module that the user's code imports."""
    missing = error.name or ""
    return missing == module_name or module_name.startswith(f"{missing}.")


def _raised(module_name: str, error: Exception) -> str:
    """What importing ``module_name`` raised, and where in the user's code."""
    where = _user_frame(error)
    at = "" if where is None else f" at {_shown(where[0])}, line {where[1]}"
    # A SyntaxError's text names its file and line again: its message alone.
    message = error.msg if isinstance(error, SyntaxError) else error
    return f"importing {module_name!r} raised {type(error).__name__}{at}: {message}"


def _user_frame(error: Exception) -> tuple[str, int] | None:
    """The file and line of the user's code where ``error`` was raised: the innermost
    frame outside jobq, importlib, the standard library and installed packages; else the
    outermost frame of the module imported (user code installed as a package)."""
    if isinstance(error, SyntaxError) and error.filename and os.path.isfile(error.filename):
        return error.filename, error.lineno or 0
    frames = [
        (frame.filename, frame.lineno or 0)
        for frame in traceback.extract_tb(error.__traceback__)
        if os.path.isfile(frame.filename) and not _in_jobq(frame.filename)
    ]
    users = [frame for frame in frames if not _installed(frame[0])]
    if users:
        return users[-1]
    return frames[0] if frames else None


def _in_jobq(filename: str) -> bool:
    return Path(filename).resolve().is_relative_to(_JOBQ)


def _installed(filename: str) -> bool:
    resolved = Path(filename).resolve()
    return any(resolved.is_relative_to(root) for root in _INSTALLED)


def _shown(filename: str) -> str:
    """``filename`` relative to the current directory when it is inside it."""
    resolved = Path(filename).resolve()
    try:
        return str(resolved.relative_to(Path.cwd()))
    except ValueError:
        return str(resolved)

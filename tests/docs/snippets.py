"""The code blocks of a Markdown page, read the way the page's test runs them.

A page's blocks run in order, in one Python namespace, in a fresh directory of their own,
with ``JOBQ_DATABASE_URL`` naming a fresh database (docs/contributing.md says how to
write them):

- ```` ```python ```` blocks run; one with ``title="name.py"`` is written to that file
  instead (an app that a later block imports or a later command names with ``--app``).
- ```` ```sh ```` (``bash``, ``console``, ``shell``) blocks: every command whose program
  is ``jobq`` is parsed by jobq's own click commands, so an unknown command or option, or
  a value that does not parse, fails. On a page whose front matter says
  ``snippets: {shell: run}`` the ``jobq`` and ``python`` commands also run, in order
  with the Python blocks, and must exit 0 (or the status a trailing ``# exit N`` names);
  servers (``jobq worker`` without ``--burst``, ``jobq dashboard``, ``jobq metrics``)
  are only parsed. Other programs (pip, systemctl, curl, export...), and ``python -m``
  venv, pip or build, are not run.
- Front matter ``snippets: {database: postgresql}`` (or ``mysql``) gives the page a fresh
  schema or database on the test server instead of SQLite; ``url: <placeholder>`` names
  a URL the page writes, replaced by that database's wherever it appears.
"""

from __future__ import annotations

import importlib
import inspect
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

import jobq

SHELLS = {"sh", "bash", "console", "shell"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
TITLE = re.compile(r"""title=["']([^"']+)["']""")
EXIT = re.compile(r"#\s*exit\s+(\d+)\s*$")
SERVERS = {"dashboard", "metrics"}


@dataclass
class Step:
    """One thing a page's test does: run Python, write a file, or a shell command."""

    # "python", "file", "check" (parse a jobq command), "run", or "example" (a docstring's:
    # Python run on its own, in a fresh namespace with a fresh SQLite database)
    kind: str
    text: str
    line: int  # 1-based line of the page where the block or command starts
    title: str = ""
    exit_status: int = 0


@dataclass
class Page:
    path: Path
    options: dict[str, Any] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)

    @property
    def database(self) -> str:
        return str(self.options.get("database", "sqlite"))

    @property
    def blocks(self) -> int:
        return len({step.line for step in self.steps if step.kind in {"python", "file"}})


def front_matter(text: str) -> tuple[dict[str, Any], int]:
    """The page's ``snippets:`` options and the number of lines the front matter takes."""
    if not text.startswith("---\n"):
        return {}, 0
    end = text.find("\n---\n", 4)
    if end < 0:
        return {}, 0
    meta = yaml.safe_load(text[4:end]) or {}
    lines = text[: end + 5].count("\n")
    return dict(meta.get("snippets") or {}), lines


def fenced_blocks(text: str) -> list[tuple[str, str, int]]:
    """(info string, body, line of the body's first line) of each fenced block."""
    lines = text.splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, info = match["indent"], match["fence"], match["info"].strip()
        body: list[str] = []
        start = i + 2
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            line = lines[i]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            i += 1
        blocks.append((info, "\n".join(body) + "\n", start))
        i += 1
    return blocks


def commands(body: str, first_line: int) -> list[tuple[str, int]]:
    """The shell commands of a block, each with the line it starts on: continuations
    joined, comment lines dropped, ``&&`` chains split. In a block with ``$ `` prompts
    only the prompted lines are commands (the others are their output)."""
    prompted = any(line.lstrip().startswith("$ ") for line in body.splitlines())
    found = []
    pending, pending_line = "", 0
    for offset, raw in enumerate(body.splitlines()):
        line = raw.strip()
        if not pending:
            pending_line = first_line + offset
            if prompted:
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            if not line or line.startswith("#"):
                continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        found.extend((part.strip(), pending_line) for part in pending.split(" && "))
        pending = ""
    return found


def program(command: str) -> tuple[str, list[str]]:
    """The program a command runs (its basename, after any VAR=value words) and its
    arguments; a trailing ``# comment`` is not an argument."""
    words = shlex.split(command, comments=True)
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words.pop(0)
    if not words:
        return "", []
    return Path(words[0]).name, words[1:]


def runs_forever(args: list[str]) -> bool:
    """A jobq command that serves until stopped: parsed only, never run."""
    if not args:
        return False
    if args[0] in SERVERS:
        return True
    return args[0] == "worker" and "--burst" not in args and "--help" not in args


def read_page(path: Path) -> Page:
    """Every step of the page at ``path``, in the page's order."""
    text = path.read_text(encoding="utf-8")
    options, _ = front_matter(text)
    page = Page(path, options)
    run_shell = options.get("shell") == "run"
    for info, body, line in fenced_blocks(text):
        language = info.split()[0].lstrip(".{").rstrip("}") if info else ""
        title_match = TITLE.search(info)
        if language == "python":
            if title_match:
                page.steps.append(Step("file", body, line, title=title_match.group(1)))
            else:
                page.steps.append(Step("python", body, line))
        elif language in SHELLS:
            for command, at in commands(body, line):
                name, args = program(command)
                status = EXIT.search(command)
                exit_status = int(status.group(1)) if status else 0
                if name == "jobq":
                    page.steps.append(Step("check", command, at))
                if run_shell and name in {"jobq", "python", "python3"}:
                    if name == "jobq" and runs_forever(args):
                        continue
                    if args[:2] in (["-m", "venv"], ["-m", "pip"], ["-m", "build"]):
                        continue  # installs: shown, not run
                    page.steps.append(Step("run", command, at, exit_status=exit_status))
    return page


def pages(root: Path) -> list[Path]:
    """README.md and every Markdown page of the site."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def documented_objects() -> list[tuple[str, object]]:
    """(dotted name, object) of every name the API reference documents, and of their
    public methods and properties: the docstrings the site shows."""
    roots = [(f"jobq.{name}", getattr(jobq, name)) for name in jobq.__all__]
    for dotted in CAPABILITIES:
        module, _, name = dotted.rpartition(".")
        roots.append((dotted, getattr(importlib.import_module(module), name)))
    found = []
    for dotted, obj in roots:
        found.append((dotted, obj))
        if inspect.isclass(obj):
            for member, value in vars(obj).items():
                if not member.startswith("_") or member == "__init__":
                    found.append((f"{dotted}.{member}", value))
    return found


#: What docs/reference/capabilities.md and api.md document besides jobq.__all__.
CAPABILITIES = (
    "jobq.core.store.TaskStore",
    "jobq.lifecycle.admin.TaskAdmin",
    "jobq.limits.sql.Limits",
    "jobq.limits.pause.Pauses",
    "jobq.queues.retention.QueueRetention",
    "jobq.cron.periodic.Periodic",
    "jobq.workflows.rows.Workflows",
    "jobq.locks.Locks",
    "jobq.worker.Worker",
    "jobq.testing.immediate",
    "jobq.testing.run_pending",
    "jobq.testing.isolated",
)


def docstring_page() -> Page:
    """The examples of the reference's docstrings (```python blocks in them), as one
    page whose steps each run on their own: a fresh namespace, and a fresh SQLite
    database as ``JOBQ_DATABASE_URL``."""
    page = Page(Path("docstrings"))
    seen: set[int] = set()
    for dotted, obj in documented_objects():
        target = obj.fget if isinstance(obj, property) else obj
        target = getattr(target, "__func__", target)
        doc = inspect.getdoc(target) if id(target) not in seen else None
        seen.add(id(target))
        if not doc:
            continue
        for info, body, line in fenced_blocks(doc):
            if info.split()[:1] == ["python"]:
                page.steps.append(Step("example", body, line, title=dotted))
    return page

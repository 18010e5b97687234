"""Runs one page's steps in order: ``python page_runner.py steps.json`` in the page's
own directory. A separate process per page, so that a page's imports, environment and
working directory are its own; each failure names the page and line it comes from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import click

from jobq.cli import main as jobq_command
from tests.docs.snippets import program


def check(command: str) -> None:
    """Parse a jobq command line with jobq's click commands, without running it."""
    _, args = program(command)
    if "--help" in args or "--version" in args:
        args = [arg for arg in args if arg not in {"--help", "--version"}]
    command_obj: click.Command = jobq_command
    name = "jobq"
    parent = None
    while True:
        if not args and isinstance(command_obj, click.Group):
            return  # `jobq --version`, `jobq queues --help`: the command exists
        ctx = command_obj.make_context(name, list(args), parent=parent, resilient_parsing=False)
        if not isinstance(command_obj, click.Group):
            return
        rest = [*ctx._protected_args, *ctx.args]
        if not rest:
            return
        name, sub, args = command_obj.resolve_command(ctx, rest)
        if sub is None:
            raise click.UsageError(f"no such command {name!r}")
        command_obj, parent = sub, ctx


def main() -> int:
    spec: dict[str, Any] = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    page = spec["page"]
    sys.path.insert(0, os.getcwd())
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    namespace: dict[str, Any] = {"__name__": "__main__"}
    examples = 0
    for step in spec["steps"]:
        # A docstring's example is named by the object it documents.
        where = f"{(step['kind'] == 'example' and step['title']) or page}:{step['line']}"
        text = step["text"]
        try:
            if step["kind"] == "file":
                with open(step["title"], "w", encoding="utf-8") as file:
                    file.write(text)
            elif step["kind"] == "python":
                exec(compile(text, where, "exec"), namespace)
            elif step["kind"] == "example":
                examples += 1
                os.environ["JOBQ_DATABASE_URL"] = f"sqlite:///{os.getcwd()}/example-{examples}.db"
                exec(compile(text, where, "exec"), {"__name__": "__main__"})
            elif step["kind"] == "check":
                check(text)
            else:
                done = subprocess.run(
                    ["bash", "-c", text],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=spec["timeout"],
                )
                if done.returncode != step["exit_status"]:
                    print(f"{where}: `{text}` exited {done.returncode}", file=sys.stderr)
                    print(done.stdout + done.stderr, file=sys.stderr)
                    return 1
        except (click.ClickException, SystemExit) as error:
            print(f"{where}: `{text.strip()}` does not parse: {error}", file=sys.stderr)
            return 1
        except Exception:
            print(f"{where}: the snippet raised", file=sys.stderr)
            traceback.print_exc()
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""An app module that fails as it is imported: every command that loads an app says so in
one line naming the file and line of the user's code and the exception, with no
traceback through jobq's code, and exits 1. The commands run in subprocesses
(`python -m jobq.cli`) in a directory holding the user's modules, as a user runs them."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from tests.acceptance.test_cli import Cli, failure
from tests.acceptance.test_cli_help import LOADING_AN_APP, NEEDS_BESIDES_APP

#: User modules, each with the line its command should print (after the app's path).
MODULES = {
    # Raises as it runs.
    "boom": (
        "import jobq\n\napp = jobq.App()\nraise RuntimeError('no config')\n",
        "importing 'boom' raised RuntimeError at boom.py, line 4: no config",
    ),
    # Imports a module that is not installed: not "the module itself not found".
    "needs_missing": (
        "import jobq\nimport jobq_test_no_such_dependency\n\napp = jobq.App()\n",
        "importing 'needs_missing' raised ModuleNotFoundError at needs_missing.py, line 2: "
        "No module named 'jobq_test_no_such_dependency'",
    ),
    # Fails inside the standard library, called from the user's line 3.
    "bad_config": (
        "import json\n\nsettings = json.loads('{oops')\n",
        "importing 'bad_config' raised JSONDecodeError at bad_config.py, line 3: Expecting "
        "property name enclosed in double quotes: line 1 column 2 (char 1)",
    ),
    # Does not compile.
    "typo": (
        "import jobq\n\napp = jobq.App(\n",
        "importing 'typo' raised SyntaxError at typo.py, line 3: '(' was never closed",
    ),
}


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    for name, (source, _) in MODULES.items():
        (tmp_path / f"{name}.py").write_text(source)
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text("import jobq\n\napp = jobq.App()\n1 / 0\n")
    return Cli(tmp_path)


@pytest.mark.parametrize(("name", "command"), LOADING_AN_APP)
def test_an_app_that_fails_on_import_is_one_line_naming_the_users_line(
    cli: Cli, name: str, command: click.Command
) -> None:
    args = [*name.split(), *NEEDS_BESIDES_APP.get(name, [])]
    cases = {
        **{f"{module}:app": line for module, (_, line) in MODULES.items()},
        "pkg.tasks:app": "importing 'pkg.tasks' raised ZeroDivisionError at "
        f"{Path('pkg', 'tasks.py')}, line 4: division by zero",
        # The module itself not found: no user code ran.
        "pkg.absent:app": "cannot import 'pkg.absent': No module named 'pkg.absent'",
    }
    commands = [[*args, "--app", app] for app in cases]
    url = "sqlite:///jobq.db"
    for (app, line), done in zip(cases.items(), cli.many(url, commands), strict=True):
        assert failure(done) == f"error: Cannot load the app {app!r}: {line}", (name, app)
        assert "Traceback" not in done.stderr

"""jobq's pytest plugin, as a user's test suite meets it: installed, not imported."""

from __future__ import annotations

import importlib.metadata
import textwrap

import pytest

pytest_plugins = ["pytester"]

#: A user's tests: two tests enqueue with the same App, each into a database of its own.
USER_TESTS = textwrap.dedent(
    """
    import jobq
    from jobq.worker import Worker

    app = jobq.App()  # no URL: $JOBQ_DATABASE_URL, else sqlite:///jobq.db
    runs = []


    @app.task
    def add(a: int, b: int) -> int:
        runs.append((a, b))
        return a + b


    def test_a_worker_runs_this_tests_tasks(jobq_isolate, jobq_database):
        store = jobq_isolate(app)
        assert jobq_isolate(app) is store and app.store is store
        assert str(store.engine.url) == jobq_database
        ids = [add.enqueue(a=1, b=2), add.enqueue(a=3, b=4)]
        worker = Worker(app, burst=True, poll_interval=0.05)
        worker.run()
        assert worker.exit_code == 0
        assert [store.get(i).result for i in ids] == [3, 7]
        assert store.counts() == {("default", jobq.Status.DONE): 2}


    def test_another_test_sees_only_its_own_tasks(jobq_isolate):
        store = jobq_isolate(app)
        task_id = add.enqueue(a=5, b=5)
        assert store.counts() == {("default", jobq.Status.QUEUED): 1}
        (task,) = store.capture(10, worker_id="w")
        assert (task.id, task.args) == (task_id, {"a": 5, "b": 5})


    def test_the_app_has_its_own_store_back_after_each_test():
        assert app._store is None
        assert runs == [(1, 2), (3, 4)]


    def test_the_database_is_migrated_and_empty(jobq_database):
        store = jobq.Store(jobq_database)
        try:
            store.check_schema()
            assert store.counts() == {}
        finally:
            store.dispose()
    """
)


def test_the_plugin_is_registered_for_pytest_and_pytest_is_no_dependency() -> None:
    (entry,) = [e for e in importlib.metadata.entry_points(group="pytest11") if e.name == "jobq"]
    assert entry.value == "jobq.testing.pytest_plugin"
    requires = importlib.metadata.requires("jobq") or []
    assert all("extra ==" in r for r in requires if r.lower().startswith("pytest"))


def test_each_test_gets_a_database_of_its_own_and_the_working_directory_none(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JOBQ_DATABASE_URL", raising=False)
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    assert not list(pytester.path.glob("jobq.db*"))


def test_an_app_not_isolated_keeps_its_own_url(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin changes nothing for tests that do not ask for its fixtures (and so the
    check above would see a ./jobq.db made by mistake)."""
    monkeypatch.delenv("JOBQ_DATABASE_URL", raising=False)
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    pytester.makepyfile(
        test_user="""
        import jobq

        def test_default_url():
            app = jobq.App()
            app.migrate()
            app.store.dispose()
        """
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert (pytester.path / "jobq.db").exists()


def test_the_fixtures_are_listed_with_their_documentation(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    result = pytester.runpytest_subprocess("--fixtures", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(
        [
            "*jobq_database*",
            "*URL of a fresh, migrated SQLite database*",
            "*jobq_isolate*",
            "*pointing an App at*",
        ]
    )

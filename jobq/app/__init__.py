"""The application: App (the registry of tasks + a Store + its configuration), what user code
imports, and the public Store, which builds every capability on the core."""

from jobq.app.application import App, TaskFunction

__all__ = ["App", "TaskFunction"]

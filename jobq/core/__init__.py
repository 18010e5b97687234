"""The core: enqueue, capture, the fenced end, heartbeat and rescue of tasks.

It never imports a capability: a capability acts through the extension points of
jobq.core.hooks, which it registers on a TaskStore.
"""

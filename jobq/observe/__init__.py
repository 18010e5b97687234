"""Seeing a running system (a face): a worker's Prometheus metrics (metrics.py, a
jobq.worker.observers.RunObserver) and the whole database's (exporter.py, counting.py).
prometheus_client is imported only by the code that needs it. The OpenTelemetry spans are
the core's (jobq.core.tracing: enqueues) and the worker's (jobq.worker.run_spans: runs);
why a task is or is not running is the app's (jobq.app.why)."""

"""Seeing a running system: why one task is or is not running, from its rows (why.py); a
worker's Prometheus metrics (metrics.py) and the whole database's (exporter.py); the
OpenTelemetry spans of enqueues and runs (tracing.py). The optional libraries are
imported only by the code that needs them."""

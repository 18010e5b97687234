"""Seeing a running system from its rows: explanations of single tasks now (why.py);
metrics and traces will live here later."""

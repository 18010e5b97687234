"""Queues as operators see and steer them: pause and resume (pause.py), and the overview
of every queue that `jobq queues list` prints (overview.py)."""

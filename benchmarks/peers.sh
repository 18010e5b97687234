#!/usr/bin/env bash
# Creates benchmarks/.venv-peers: the peer queues bench_worker.py compares jobq with
# (PGQueuer, with asyncpg, the driver its documentation recommends, and psycopg; and
# Procrastinate; all from PyPI) plus jobq itself in editable mode. They live in this
# virtualenv of their own, never as jobq dependencies (asyncpg included). matplotlib is
# here too, for scale_out_plot.py's figure: a benchmark-only dependency as well.
#
#   bash benchmarks/peers.sh
#
# benchmarks/.venv-peers/ is not tracked; keep it out of git (.gitignore).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
venv="$here/.venv-peers"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q pgqueuer procrastinate asyncpg "psycopg[binary]" matplotlib
"$venv/bin/python" -m pip install -q -e "$root"
"$venv/bin/python" - <<'PY'
from importlib.metadata import version
for name in ("jobq", "pgqueuer", "procrastinate", "asyncpg", "psycopg", "sqlalchemy", "matplotlib"):
    print(f"{name} {version(name)}")
PY
echo "peers ready: $venv/bin/python"

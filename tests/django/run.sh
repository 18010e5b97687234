#!/usr/bin/env bash
# The Django integration's tests (tests/django) in a virtualenv of their own: Django 6 needs
# Python 3.12+, jobq's main suite runs on 3.11. SQLite always; PostgreSQL when
# JOBQ_TEST_POSTGRES_URL is set (each run in a database of its own, made and dropped by
# pytest-django); MariaDB (or MySQL) when JOBQ_TEST_MYSQL_URL is set, through Django's
# mysqlclient, which builds against libmariadb-dev (or libmysqlclient-dev) and pkg-config: without
# them MariaDB is left out, or exit 1 if JOBQ_TEST_REQUIRE names mysql.
# Without Python 3.12+: exit 1 if JOBQ_TEST_REQUIRE names django, else 0.
set -euo pipefail
cd "$(dirname "$0")/../.."

python=""
if command -v pyenv >/dev/null && prefix=$(pyenv prefix 3.12.1 2>/dev/null); then
    python="$prefix/bin/python"
fi
for candidate in python3.13 python3.12; do
    [ -n "$python" ] || ! command -v "$candidate" >/dev/null || python=$(command -v "$candidate")
done
if [ -z "$python" ] || ! "$python" -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null; then
    echo "tests/django: no Python 3.12 or newer (Django 6 needs one); not run"
    case ",${JOBQ_TEST_REQUIRE:-}," in *,django,*) exit 1 ;; esac
    exit 0
fi

venv=.venv-django
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/pip" install -q -e '.[django,web,dev,mysql]' 'pytest-django>=4.9' PyYAML  # PyYAML: tests/docs/snippets.py reads the page

# Type-checked here: the main venv (3.11, no Django) leaves jobq/contrib/django out.
"$venv/bin/mypy" --python-version 3.12 $(find jobq/contrib/django -name "*.py")

export PYTHONPATH=tests/django/project DJANGO_SETTINGS_MODULE=djproject.settings
export JOBQ_DJANGO_NAME="jobq_django_$$"
databases=(sqlite)
[ -z "${JOBQ_TEST_POSTGRES_URL:-}" ] || databases+=(postgresql)
if [ -n "${JOBQ_TEST_MYSQL_URL:-}" ]; then
    if "$venv/bin/python" -c 'import MySQLdb' 2>/dev/null || "$venv/bin/pip" install -q mysqlclient; then
        databases+=(mysql)
    else
        echo "tests/django: mysqlclient does not build here (apt-get install libmariadb-dev pkg-config); MariaDB not run"
        case ",${JOBQ_TEST_REQUIRE:-}," in *,mysql,*) exit 1 ;; esac
    fi
fi
for database in "${databases[@]}"; do
    echo "tests/django on $database"
    JOBQ_DJANGO_DATABASE=$database "$venv/bin/pytest" -q -p no:cacheprovider tests/django
done

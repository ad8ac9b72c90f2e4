#!/usr/bin/env bash
# The one test command (README, and .ci/run from a clean clone): installs what
# the tests need, then runs them. Safe to run again: every step is idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet --disable-pip-version-check -e ".[dev]"
# What the integration tests run against: real servers (Prometheus, etcd, kube-apiserver built once
# and cached), and any other tool a scripts/install-*.sh provides. Each script is idempotent.
for script in scripts/install-*.sh; do
  bash "$script"
done

# The checks people use to help themselves: style and bugs (ruff), the layers and the one adapter per server
# (import-linter), types (mypy; strict flags where the code is pure). Any failure fails the run.
echo "ruff, import-linter, mypy"
python3 -m ruff check .
lint-imports --no-cache
python3 -m mypy

set +e
python3 -m pytest "$@"
status=$?
set -e
# pytest's 5 means "no tests collected": a test run that tests nothing has failed.
exit "$status"

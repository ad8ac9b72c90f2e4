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

set +e
python3 -m pytest "$@"
status=$?
set -e
# pytest's 5 means "no tests collected": a test run that tests nothing has failed.
exit "$status"

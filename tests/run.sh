#!/usr/bin/env bash
# The one test command (README, and .ci/run from a clean clone): installs what
# the tests need, then runs them. Safe to run again: every step is idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet --disable-pip-version-check -e ".[dev]"
# Real servers the integration tests run against (Prometheus, etcd, kube-apiserver built once and cached).
bash scripts/install-servers.sh

set +e
python3 -m pytest "$@"
status=$?
set -e
# pytest's 5 means "no tests collected": a test run that tests nothing has failed.
exit "$status"

#!/usr/bin/env bash
# Install Debian's chromium, the real headless browser tests/test_report.py loads the report in.
# Idempotent: nothing is done when chromium is already on PATH.
set -euo pipefail

if command -v chromium >/dev/null; then
  echo "[install-chromium] $(chromium --version 2>/dev/null || echo chromium) at $(command -v chromium)"
  exit 0
fi
source "$(dirname "$0")/apt.sh"
echo "[install-chromium] apt-get install chromium"
apt_install chromium
echo "[install-chromium] $(chromium --version) at $(command -v chromium)"

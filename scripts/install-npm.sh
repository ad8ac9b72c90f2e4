#!/usr/bin/env bash
# Install what tests/test_dashboards.py type-checks the Grafana dashboards with:
# typescript and @grafana/schema at the versions pinned in dashboards/typecheck/package.json,
# into $HEADROOM_CACHE/npm (default ~/.cache/headroom/npm), never into the repo.
# Idempotent: skipped when that package.json is already installed there (a rerun takes < 1 s).
set -euo pipefail
source "$(dirname "$0")/apt.sh"
cd "$(dirname "$0")/.."

CACHE="${HEADROOM_CACHE:-$HOME/.cache/headroom}"
DEST="$CACHE/npm"
SPEC=dashboards/typecheck/package.json
say() { echo "[install-npm] $*"; }

if ! command -v npm >/dev/null; then
  say "apt-get install nodejs npm"
  apt_install nodejs npm
fi

# The stamp is the package.json that was installed: a changed pin reinstalls.
if cmp -s "$SPEC" "$DEST/.installed-package.json" && [ -x "$DEST/node_modules/.bin/tsc" ]; then
  say "cached: $("$DEST/node_modules/.bin/tsc" --version) in $DEST"
  exit 0
fi
mkdir -p "$DEST"
cp "$SPEC" "$DEST/package.json"
say "npm install $(grep -o '"[@a-z/]*": "[0-9.]*"' "$SPEC" | tr -d '"' | tr '\n' ' ')into $DEST"
npm install --prefix "$DEST" --no-audit --no-fund --loglevel=error >/dev/null
cp "$SPEC" "$DEST/.installed-package.json"
say "installed: $("$DEST/node_modules/.bin/tsc" --version)"

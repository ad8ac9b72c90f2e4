#!/usr/bin/env bash
# Create the peers' venv (statsforecast) at bench/.venv-peers. Idempotent.
# statsforecast needs pandas<3; the main env has pandas 3.x, hence a separate venv.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.venv-peers"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if "$venv/bin/python" -c "import statsforecast, pandas; assert int(pandas.__version__.split('.')[0]) < 3" 2>/dev/null; then
  echo "peers venv ready: $venv" >&2
  exit 0
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet -r "$here/peers/requirements.txt"
"$venv/bin/python" -c "import statsforecast, pandas; print('statsforecast', statsforecast.__version__, 'pandas', pandas.__version__)" >&2

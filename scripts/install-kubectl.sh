#!/usr/bin/env bash
# kubectl for tests/test_deploy.py (it renders deploy/base with `kubectl kustomize`).
# The machine image ships kubectl 1.32 (kustomize v5.5); where it is missing, Debian's
# kubernetes-client (kubectl 1.20, kustomize v2) renders the same objects, because
# deploy/base uses only plain resources and a configMapGenerator. Idempotent.
set -euo pipefail

if command -v kubectl >/dev/null && kubectl kustomize --help >/dev/null 2>&1; then
  echo "[install-kubectl] $(command -v kubectl) present"
  exit 0
fi
source "$(dirname "$0")/apt.sh"
echo "[install-kubectl] apt-get install kubernetes-client"
apt_install kubernetes-client
kubectl version --client

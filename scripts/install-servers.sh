#!/usr/bin/env bash
# Install the real servers the integration tests run against (Debian 12):
#   prometheus + promtool, etcd, and kube-apiserver 1.20.2 built from Debian's
#   `kubernetes` source package (no docker, builds offline from vendor/).
# Idempotent: what is present is skipped; the apiserver binary is cached under
# ~/.cache/headroom/kube-apiserver-1.20.2 so a rerun takes seconds.
set -euo pipefail

CACHE="${HEADROOM_CACHE:-$HOME/.cache/headroom}"
APISERVER="$CACHE/kube-apiserver-1.20.2"
source "$(dirname "$0")/apt.sh"
t0=$(date +%s)
say() { echo "[install-servers +$(( $(date +%s) - t0 ))s] $*"; }

need=()
command -v prometheus >/dev/null || need+=(prometheus)
command -v etcd >/dev/null || need+=(etcd-server)
if [ ! -x "$APISERVER" ]; then
  command -v go >/dev/null || need+=(golang-go)
  command -v rsync >/dev/null || need+=(rsync)
  [ -d /usr/share/gocode/src/github.com/modern-go/reflect2 ] || need+=(golang-github-modern-go-reflect2-dev)
fi
# Building needs the source package: enable deb-src before the (single) apt-get update.
SRC_LIST=/etc/apt/sources.list.d/headroom-src.sources
if [ ! -x "$APISERVER" ] && ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ /etc/apt/sources.list 2>/dev/null; then
  say "enabling deb-src"
  sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources | $SUDO tee "$SRC_LIST" >/dev/null
fi
if [ "${#need[@]}" -gt 0 ]; then
  say "apt-get install ${need[*]}"
  apt_install "${need[@]}"
fi
say "prometheus: $(command -v prometheus) / promtool: $(command -v promtool) / etcd: $(command -v etcd)"

if [ -x "$APISERVER" ]; then
  say "kube-apiserver cached at $APISERVER"
  exit 0
fi

# Build kube-apiserver from Debian's `kubernetes` source package (it carries vendor/).
BUILD="$CACHE/build"
mkdir -p "$BUILD"
cd "$BUILD"
if ! ls kubernetes_*.orig.tar.gz >/dev/null 2>&1; then
  say "apt-get update; apt-get source --download-only kubernetes"
  apt_update
  apt-get source -qq --download-only kubernetes
fi
if [ ! -f kubernetes-1.20.2/.headroom-unpacked ]; then  # a half-unpacked tree is redone
  say "unpacking source"
  rm -rf kubernetes-1.20.2
  tar xzf kubernetes_*.orig.tar.gz
  touch kubernetes-1.20.2/.headroom-unpacked
fi
cd kubernetes-1.20.2
# The vendored reflect2 1.0.1 segfaults under Go >= 1.19 on the first custom-resource create.
rm -rf vendor/github.com/modern-go/reflect2
cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 vendor/github.com/modern-go/
mkdir -p .go/src/k8s.io
[ -e .go/src/k8s.io/kubernetes ] || ln -s ../../.. .go/src/k8s.io/kubernetes
say "building kube-apiserver (cold: several minutes)"
GOPATH=$PWD/.go CGO_ENABLED=0 GOPROXY=off make WHAT=cmd/kube-apiserver >"$BUILD/make.log" 2>&1 \
  || { tail -40 "$BUILD/make.log"; exit 1; }
install -m 0755 _output/bin/kube-apiserver "$APISERVER.tmp"
mv "$APISERVER.tmp" "$APISERVER"
say "kube-apiserver built and cached at $APISERVER"
if [ "${HEADROOM_KEEP_BUILD:-0}" != 1 ]; then
  say "removing build tree (set HEADROOM_KEEP_BUILD=1 to keep it)"
  cd "$CACHE" && rm -rf "$BUILD"
  [ -f "$SRC_LIST" ] && $SUDO rm -f "$SRC_LIST"
fi
say "done"

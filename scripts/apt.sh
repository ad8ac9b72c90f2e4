# Sourced by the scripts/install-*.sh: apt-get as root or through sudo, non-interactive,
# the package index updated at most once per script.
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
_apt_updated=0
apt_update() { [ "$_apt_updated" = 1 ] || { $SUDO apt-get update -qq; _apt_updated=1; }; }
apt_install() { apt_update; $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null; }

#!/usr/bin/env bash
# Print the path of a redis-server binary, installing Debian's redis-server package if missing.
# For `penchant bench bloom --redis-server "$(scripts/redis-server.sh)"`: the bench starts its
# own redis-server on a free loopback port, so no Redis service is left running here.
# Idempotent. Needs root (or sudo) only when the package is missing.
set -euo pipefail

if path="$(command -v redis-server 2>/dev/null)"; then
  echo "$path"
  exit 0
fi

"$(dirname "$0")/install-deps.sh" redis-server
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

# The package may start a service; the bench runs its own server, so stop and disable it.
$sudo service redis-server stop >/dev/null 2>&1 || true
if command -v systemctl >/dev/null 2>&1; then
  $sudo systemctl disable --now redis-server >/dev/null 2>&1 || true
fi
if command -v update-rc.d >/dev/null 2>&1; then
  $sudo update-rc.d redis-server disable >/dev/null 2>&1 || true
fi

command -v redis-server 2>/dev/null || {
  echo "redis-server still not found after installing the package" >&2
  exit 1
}

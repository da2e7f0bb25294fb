#!/usr/bin/env bash
# Install the system packages Penchant's build and tests need on a fresh Debian machine.
#   libclang-dev: bindgen, for RocksDB's C API (librocksdb-sys).
#   curl, jq: the README's quick start (and its test, crates/penchant/tests/e2e/readme.rs).
# Further Debian packages can be named as arguments (scripts/redis-server.sh does).
# Idempotent: installs only what is missing. Needs root (or sudo) when something is missing.
set -euo pipefail

missing=()
for package in libclang-dev curl jq "$@"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing: ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null || true
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

#!/usr/bin/env bash
# Print the path of a Bigtable emulator binary (flags `-host H -port P`, banner
# "Cloud Bigtable emulator running on H:P"), installing or building one if needed:
#   1. $BIGTABLE_EMULATOR_BINARY, if set;
#   2. the Google Cloud CLI's cbtemulator, if installed;
#   3. otherwise a launcher around Go's bttest (scripts/bttest/main.go), built with Debian's
#      golang-go and golang-google-cloud-dev in GOPATH mode, cached under ~/.cache/penchant.
# Fails loudly when none can be had: the Bigtable tests are never skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -n "${BIGTABLE_EMULATOR_BINARY:-}" ]]; then
  echo "$BIGTABLE_EMULATOR_BINARY"
  exit 0
fi
sdk="${CBTEMULATOR:-/usr/lib/google-cloud-sdk/platform/bigtable-emulator/cbtemulator}"
if [[ -x "$sdk" ]]; then
  echo "$sdk"
  exit 0
fi

cache="${XDG_CACHE_HOME:-$HOME/.cache}/penchant"
out="$cache/bttest-emulator"
if [[ ! -x "$out" || scripts/bttest/main.go -nt "$out" ]]; then
  if [[ ! -d /usr/share/gocode/src/cloud.google.com/go/bigtable/bttest ]] || ! command -v go >/dev/null; then
    echo "bigtable-emulator: installing golang-go and golang-google-cloud-dev (apt)" >&2
    sudo=""
    [[ $(id -u) -ne 0 ]] && sudo="sudo"
    if ! { $sudo apt-get update -qq >&2 &&
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq golang-go golang-google-cloud-dev >&2; }; then
      echo "bigtable-emulator: no Bigtable emulator: cbtemulator is not installed and the Go" \
        "packages to build one could not be installed" >&2
      exit 1
    fi
  fi
  mkdir -p "$cache/gopath/src/bttest-emulator"
  cp scripts/bttest/main.go "$cache/gopath/src/bttest-emulator/main.go"
  (cd "$cache/gopath/src/bttest-emulator" &&
    GO111MODULE=off GOPATH="$cache/gopath:/usr/share/gocode" GOFLAGS= go build -o "$out" .) >&2
fi
echo "$out"

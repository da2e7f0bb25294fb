#!/usr/bin/env bash
# Run every test: unit, conformance (embedded and Bigtable), property, crash and HTTP tests.
# Tests start the servers they need themselves (Bigtable emulators, `penchant serve`) and stop
# them when they end; this script only makes sure an emulator binary and the official clients
# exist.
set -euo pipefail
cd "$(dirname "$0")/.."
# Chromium and chromedriver: the dashboard's browser tests (crates/penchant-server/tests/server/dashboard).
./scripts/install-deps.sh chromium chromium-driver
BIGTABLE_EMULATOR_BINARY="$(./scripts/bigtable-emulator.sh)"
export BIGTABLE_EMULATOR_BINARY
echo "Bigtable emulator: $BIGTABLE_EMULATOR_BINARY" >&2
# The official Algolia clients for the end-to-end tests.
E2E_PYTHON="$(./scripts/e2e-python.sh)"
export E2E_PYTHON
./scripts/e2e-node.sh
exec cargo test --workspace --release "$@"

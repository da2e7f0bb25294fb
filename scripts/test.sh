#!/usr/bin/env bash
# Run every test: unit, conformance (embedded and Bigtable), property, crash and HTTP tests.
# Tests start the servers they need themselves (Bigtable emulators, `penchant serve`) and stop
# them when they end; this script only makes sure an emulator binary exists.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
BIGTABLE_EMULATOR_BINARY="$(./scripts/bigtable-emulator.sh)"
export BIGTABLE_EMULATOR_BINARY
echo "Bigtable emulator: $BIGTABLE_EMULATOR_BINARY" >&2
exec cargo test --workspace --release "$@"

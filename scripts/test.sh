#!/usr/bin/env bash
# Run every test: unit, conformance, property, crash and HTTP tests.
# Starts whatever servers the tests need and stops them afterwards (none yet beyond the
# processes the tests spawn themselves).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
exec cargo test --workspace --release "$@"

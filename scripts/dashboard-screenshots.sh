#!/usr/bin/env bash
# Refresh docs/DASHBOARD.md's screenshots (docs/dashboard/*.png): the dashboard's browser
# tests save a PNG of each page, here also into docs/dashboard. Needs Chromium and chromedriver
# (installed below, as scripts/test.sh does).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh chromium chromium-driver
DASHBOARD_SCREENSHOTS_DIR="$PWD/docs/dashboard" \
  cargo test -p penchant-server --test server dashboard:: "$@"
ls -l docs/dashboard/*.png

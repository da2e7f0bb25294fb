#!/usr/bin/env bash
# Install the end-to-end tests' npm packages (e2e/node: search-insights, algoliasearch) from the
# lock file.
set -euo pipefail
cd "$(dirname "$0")/../e2e/node"
if [[ ! -d node_modules/search-insights ]] || [[ ! -d node_modules/algoliasearch ]] \
  || [[ package-lock.json -nt node_modules/.package-lock.json ]]; then
  echo "e2e-node: npm ci in e2e/node" >&2
  npm ci --silent --no-audit --no-fund >&2
fi

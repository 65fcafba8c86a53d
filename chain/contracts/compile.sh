#!/bin/sh
# Recompiles the Solidity sources in chain/contracts/src into chain/contracts/artifacts.
# solc comes from the npm registry into a throw-away folder outside the repository.
set -eu
SOLC_DIR=${SOLC_DIR:-/tmp/solc}
SOLC_VERSION=${SOLC_VERSION:-0.8.28}
if [ ! -d "$SOLC_DIR/node_modules/solc" ]; then
	mkdir -p "$SOLC_DIR"
	npm install --prefix "$SOLC_DIR" --no-save --no-audit --no-fund "solc@$SOLC_VERSION"
fi
SOLC_DIR=$SOLC_DIR exec node "$(dirname "$0")/compile.js"

#!/usr/bin/env bash
# Runs a command on a supported Node.js: `scripts/supported-node.sh vitest run …`. The package.json
# scripts go through it. When the Node first on PATH is older than the supported range, the one
# bootstrap.sh fetched into .cache/node is put first on PATH for the command, so the command, vitest's
# workers and every process the code starts (with process.execPath, or `node`, `npm`, `pnpm` from
# PATH) run on it. Without one it stops with a line saying to run bootstrap.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/node-versions.sh"

current="$(node --version 2>/dev/null || true)"
if ! node_is_supported "$current"; then
  fetched="$(fetched_node_bin)"
  if ! node_is_supported "$("$fetched/node" --version 2>/dev/null || true)"; then
    echo "fenced needs Node.js $SUPPORTED_NODE_RANGE, this machine's is ${current:-missing}: run ./scripts/bootstrap.sh, which fetches Node $FETCHED_NODE_MAJOR into .cache/node" >&2
    exit 1
  fi
  export PATH="$fetched:$PATH"
  # pnpm names the Node it runs on to the scripts it starts; name this one instead.
  [ -z "${NODE:-}" ] || export NODE="$fetched/node"
  [ -z "${npm_node_execpath:-}" ] || export npm_node_execpath="$fetched/node"
  # Native addons built under it (node-gyp, in pnpm install) compile against its own headers.
  export npm_config_nodedir="${fetched%/bin}"
fi
exec "$@"

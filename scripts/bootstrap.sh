#!/usr/bin/env bash
# Makes a fresh Debian machine with Node.js and npm ready to run fenced's demo and tests:
# the servers they start (redis-server, PostgreSQL, Ceph radosgw), gcc for the clock shim, stress-ng
# for the loaded test run, SPIN for the protocol's model check, promtool for the alert rules, jq for the README's curl lines, tar for the release test, a
# supported Node when the machine's is older (see node-versions.sh), pnpm, and the workspace's packages. Idempotent and
# quick when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v redis-cli >/dev/null || missing+=(redis-tools)
compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || missing+=(postgresql)
command -v radosgw >/dev/null || missing+=(radosgw)
command -v ceph-mon >/dev/null || missing+=(ceph-mon)
command -v ceph-osd >/dev/null || missing+=(ceph-osd)
command -v gcc >/dev/null || missing+=(gcc libc6-dev)
# The release test unpacks the tarballs `pnpm pack` writes.
command -v tar >/dev/null || missing+=(tar)
command -v gzip >/dev/null || missing+=(gzip)
# The gateway's client in another language (test/python) uses only Python's standard library.
command -v python3 >/dev/null || missing+=(python3)
# scripts/loaded-test.sh (the loaded run of .ci/run) puts two CPU hogs beside the tests.
command -v stress-ng >/dev/null || missing+=(stress-ng)
# The protocol's model check (test/spec) runs the SPIN model checker; its verifiers are compiled with gcc.
command -v spin >/dev/null || missing+=(spin)
# The gateway's listen backlog test (server-limits.test.ts) reads the kernel's backlog with `ss`.
command -v ss >/dev/null || missing+=(iproute2)
# The gateway's loop-delay test puts its loop and a spinning process on one CPU with `taskset`.
command -v taskset >/dev/null || missing+=(util-linux)
# The gateway's alert rules (packages/gateway/ops) are checked and unit-tested with promtool.
command -v promtool >/dev/null || missing+=(prometheus)
# The README's curl walk-through of the gateway reads leases and credentials out of answers with jq.
command -v jq >/dev/null || missing+=(jq)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing ${missing[*]} (Debian packages)" >&2
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The distribution starts its own instances; fenced starts private ones on free ports.
  $sudo service redis-server stop >/dev/null 2>&1 || true
  $sudo service postgresql stop >/dev/null 2>&1 || true
  $sudo service prometheus stop >/dev/null 2>&1 || true
fi

# A machine whose Node is older than the supported range gets Node $FETCHED_NODE_MAJOR from the npm
# registry's binary package in .cache/node (ignored by git); the machine's own Node is left as it is.
# supported-node.sh, which the package.json scripts go through, puts it first on PATH.
source scripts/node-versions.sh
if ! node_is_supported "$(node --version 2>/dev/null || true)" &&
  ! node_is_supported "$("$(fetched_node_bin)/node" --version 2>/dev/null || true)"; then
  echo "this machine's Node ($(node --version 2>/dev/null || echo missing)) is not in $SUPPORTED_NODE_RANGE: fetching Node $FETCHED_NODE_MAJOR into .cache/node" >&2
  mkdir -p "$FETCHED_NODE_DIR"
  [ -f "$FETCHED_NODE_DIR/package.json" ] || echo '{ "name": "fenced-node", "private": true }' > "$FETCHED_NODE_DIR/package.json"
  (cd "$FETCHED_NODE_DIR" && npm install --no-audit --no-fund --loglevel=error "$(node_binary_package)@$FETCHED_NODE_MAJOR")
  fetched="$("$(fetched_node_bin)/node" --version)"
  node_is_supported "$fetched" || { echo "fetched Node $fetched, which is not in $SUPPORTED_NODE_RANGE" >&2; exit 1; }
fi

if ! command -v pnpm >/dev/null || ! pnpm --version | grep -q '^10\.'; then
  npm install -g pnpm@10.34.9 >/dev/null 2>&1
fi
# On the supported Node, so that the dependencies' install scripts build for it.
scripts/supported-node.sh pnpm install --frozen-lockfile >/dev/null

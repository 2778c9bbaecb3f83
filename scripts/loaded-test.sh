#!/usr/bin/env bash
# Runs the README's test command (or the vitest arguments given) beside two CPU hogs, `stress-ng
# --cpu 2`: a shared, busy CI machine, where the servers the tests start and the tests themselves
# wait for the CPU. A test must hold here as on a quiet machine — by waiting for the condition it
# means, with timeouts derived from what was measured, never by being retried. .ci/run runs it once
# on one Node line after the quiet runs. The hogs stop when the tests end, however they end.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v stress-ng >/dev/null || { echo "stress-ng is missing: run ./scripts/bootstrap.sh" >&2; exit 1; }
stress-ng --cpu 2 --timeout 7200s >/dev/null 2>&1 &
hogs=$!
trap 'kill "$hogs" 2>/dev/null || true; wait "$hogs" 2>/dev/null || true' EXIT
[ "${1:-}" != "--" ] || shift # pnpm test:loaded -- <vitest arguments>
if [ $# -eq 0 ]; then pnpm test; else scripts/supported-node.sh vitest run "$@"; fi

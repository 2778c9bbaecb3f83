#!/usr/bin/env bash
# Runs the README's test command (with the vitest arguments given, if any) beside CPU hogs,
# `stress-ng --cpu $(nproc)` (two on CI's two cores): a shared, busy CI machine, where the servers the
# tests start and the tests themselves wait for the CPU. A test must hold here as on a quiet machine — by waiting for the condition it
# means, with timeouts derived from what was measured, never by being retried. .ci/run runs it once
# on one Node line after the quiet runs. The hogs stop when the tests end, however they end.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v stress-ng >/dev/null || { echo "stress-ng is missing: run ./scripts/bootstrap.sh" >&2; exit 1; }
# One hog per core (two on CI's two cores), running until the tests end.
stress-ng --cpu "$(nproc)" >/dev/null 2>&1 &
hogs=$!
trap 'kill "$hogs" 2>/dev/null || true; wait "$hogs" 2>/dev/null || true' EXIT
sleep 1
kill -0 "$hogs" 2>/dev/null || { echo "stress-ng did not start: this run would not be loaded" >&2; exit 1; }
[ "${1:-}" != "--" ] || shift # pnpm test:loaded -- <vitest arguments>
# Two files at once, not vitest.config.ts's three: the load its tests were measured to hold under is
# the hogs and one other file.
pnpm test --maxWorkers=2 "$@"

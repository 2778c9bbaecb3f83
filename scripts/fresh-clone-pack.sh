#!/usr/bin/env bash
# The README's "Install from a checkout", from a fresh clone: `pnpm install`, then `pnpm pack` in each
# public package's folder on its own, with no dist/ anywhere beforehand — so a prepack that needs
# another package's build output (which only a `pnpm build` or an earlier test would have left) fails
# here. A step of .ci/run of its own, not part of `pnpm test`: it clones the committed HEAD (work not
# committed is not in it) into a scratch folder, which it removes, and installs from pnpm's store
# (offline when bootstrap.sh has filled it). Each tarball must hold its package's dist/index.js, and
# the gateway's its bin and its API document.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# The supported Node first on PATH for everything below (the fetched one on an older machine).
if [ -z "${FENCED_FRESH_CLONE_ON_SUPPORTED_NODE:-}" ]; then
  FENCED_FRESH_CLONE_ON_SUPPORTED_NODE=1 exec "$root/scripts/supported-node.sh" bash "$0" "$@"
fi

scratch="$(mktemp -d "${TMPDIR:-/tmp}/fenced-fresh-clone.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
clone="$scratch/fenced"
git clone --quiet --no-local "$root" "$clone"
echo "== fresh clone of $(git -C "$clone" rev-parse --short HEAD) in $clone, Node $(node --version)"
if compgen -G "$clone/packages/*/dist" >/dev/null; then
  echo "a fresh clone holds a dist/ folder: it must be ignored by git, never committed" >&2
  exit 1
fi
if ! (cd "$clone" && pnpm install --frozen-lockfile --prefer-offline >"$scratch/install.log" 2>&1); then
  tail -n 30 "$scratch/install.log" >&2
  echo "pnpm install --frozen-lockfile failed in a fresh clone of HEAD (is pnpm-lock.yaml committed with the package.json files?)" >&2
  exit 1
fi

# Public packages: every packages/* whose package.json is not "private": true.
mapfile -t public < <(cd "$clone" && node -e '
  const { readdirSync, readFileSync, existsSync } = require("node:fs");
  for (const dir of readdirSync("packages").sort()) {
    const file = `packages/${dir}/package.json`;
    if (existsSync(file) && JSON.parse(readFileSync(file, "utf8")).private !== true) console.log(dir);
  }')
[ ${#public[@]} -gt 0 ] || { echo "no public package found under packages/" >&2; exit 1; }

tarballs="$scratch/tarballs"
mkdir -p "$tarballs"
failed=()
for dir in "${public[@]}"; do
  echo "== pnpm pack in packages/$dir"
  # As in a clone where nothing was built: what the prepack needs, it must build (or run from source).
  rm -rf "$clone"/packages/*/dist
  if ! (cd "$clone/packages/$dir" && pnpm pack --pack-destination "$tarballs" >"$scratch/pack-$dir.log" 2>&1); then
    tail -n 30 "$scratch/pack-$dir.log" >&2
    failed+=("$dir")
    continue
  fi
  name="$(cd "$clone/packages/$dir" && node -p 'const m = require("./package.json"); `${m.name.replace(/^@/, "").replace("/", "-")}-${m.version}.tgz`')"
  listing="$(tar -tzf "$tarballs/$name")"
  expected=(package/package.json package/dist/index.js package/dist/index.d.ts)
  [ "$dir" != gateway ] || expected+=(package/dist/cli.js package/dist/openapi.json)
  for path in "${expected[@]}"; do
    grep -qx "$path" <<<"$listing" || { echo "$name lacks $path" >&2; failed+=("$dir"); }
  done
  echo "   $name: $(grep -c . <<<"$listing") files"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "pnpm pack failed in a fresh clone for: ${failed[*]}" >&2
  exit 1
fi
echo "== pnpm pack works in every public package's folder of a fresh clone (${public[*]})"

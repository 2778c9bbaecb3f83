#!/usr/bin/env bash
# Lints the gateway's API document with Redocly (redocly.yaml) and Spectral (.spectral.yaml, spectral:oas):
# any error or warning fails. The document is generated from the sources (packages/gateway/src/openapi/,
# as GET /openapi.json serves it with the default limits), so this works on a fresh clone without a build
# and never lints a dist/openapi.json older than the sources. It is written to a fixed path under
# .cache/ (git-ignored), the one .redocly.lint-ignore.yaml names.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# The root's devDependencies (tsx, @redocly/cli, @stoplight/spectral-cli), also when run outside pnpm.
export PATH="$PWD/node_modules/.bin:$PATH"
document=.cache/openapi/openapi.json
mkdir -p "$(dirname "$document")"
tsx --conditions=source --input-type=module -e '
import { writeFileSync } from "node:fs";
import { openApiDocument } from "./packages/gateway/src/openapi/document.ts";
writeFileSync(process.argv[1], `${JSON.stringify(openApiDocument(), null, 2)}\n`);
' "$document"
redocly lint --format=stylish "$document"
spectral lint --fail-severity=warn --ruleset .spectral.yaml "$document"

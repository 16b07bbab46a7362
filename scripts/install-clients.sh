#!/usr/bin/env bash
# Install the real coding clients the end-to-end tests drive, at the versions whose wire
# traffic the codecs and harnesses were written against, into .e2e/ at the repository root
# (gitignored). Idempotent: does nothing when those exact versions are already there.
#
#   scripts/install-clients.sh          # install or verify
#   LORE_E2E_PREFIX=/somewhere scripts/install-clients.sh
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="${LORE_E2E_PREFIX:-$root/.e2e}"

# name@version, one per client. Keep in step with tests/e2e/test_clients.py.
packages=(
  "@anthropic-ai/claude-code@2.1.197"
  "@openai/codex@0.171.0"
  "opencode-ai@1.18.33"
)

if ! command -v npm >/dev/null 2>&1; then
  echo "install-clients: npm is not installed (Node.js 18+ is needed for the clients)" >&2
  exit 1
fi

installed_version() {
  # The version recorded in the package's own package.json, or nothing.
  local manifest="$prefix/node_modules/$1/package.json"
  [ -f "$manifest" ] || return 0
  node -e 'process.stdout.write(String(require(process.argv[1]).version || ""))' "$manifest"
}

missing=()
for spec in "${packages[@]}"; do
  name="${spec%@*}"
  want="${spec##*@}"
  have="$(installed_version "$name")"
  if [ "$have" != "$want" ]; then
    missing+=("$spec")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-clients: already installed in $prefix: ${packages[*]}"
  exit 0
fi

mkdir -p "$prefix"
echo "install-clients: installing ${missing[*]} into $prefix"
# All three together, so npm resolves one consistent tree and keeps the ones already there.
npm install --prefix "$prefix" --no-audit --no-fund --save-exact --loglevel=error "${packages[@]}"

for spec in "${packages[@]}"; do
  name="${spec%@*}"
  want="${spec##*@}"
  have="$(installed_version "$name")"
  if [ "$have" != "$want" ]; then
    echo "install-clients: $name is at '${have:-missing}' after install, expected $want" >&2
    exit 1
  fi
done
echo "install-clients: done; binaries in $prefix/node_modules/.bin"

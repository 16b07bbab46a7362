#!/usr/bin/env bash
# Build every distribution's wheel, install them in fresh environments, and prove that
#  - `pip install <lore-core wheel> <lore-harness-claude wheel>` gives a working `lore`
#    (`lore plugins` lists both, `lore serve` starts and answers /health);
#  - each plugin's tests pass with only lore-core and that plugin installed.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dist="$work/dist"

uv build --quiet --wheel --out-dir "$dist" .
for plugin in plugins/*/; do
  uv build --quiet --wheel --out-dir "$dist" "$plugin"
done
core_wheel=$(ls "$dist"/lore_core-*.whl)

echo "-- lore-core + lore-harness-claude from wheels"
uv venv --quiet "$work/claude"
VIRTUAL_ENV="$work/claude" uv pip install --quiet "$core_wheel" "$dist"/lore_harness_claude-*.whl
listed=$("$work/claude/bin/lore" plugins)
echo "$listed"
grep -q "lore-core" <<<"$listed"
grep -q "lore-harness-claude" <<<"$listed"

port=$("$work/claude/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo '{}' >"$work/lore.json"
LORE_CONFIG="$work/lore.json" LORE_PORT=$port "$work/claude/bin/lore" serve >"$work/serve.log" 2>&1 &
serve_pid=$!
ok=""
for _ in $(seq 1 100); do
  if "$work/claude/bin/python" -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=1)" 2>/dev/null; then
    ok=1
    break
  fi
  sleep 0.2
done
kill "$serve_pid" && wait "$serve_pid" || true
if [ -z "$ok" ]; then
  echo "lore serve did not answer /health:"; cat "$work/serve.log"; exit 1
fi
grep -q "listening on http://127.0.0.1:$port" "$work/serve.log"
echo "lore serve started and answered /health"

for plugin in plugins/*/; do
  name=$(basename "$plugin")
  [ -d "$plugin/tests" ] || continue
  dist_name=$(grep -m1 '^name' "$plugin/pyproject.toml" | sed -E 's/name *= *"(.*)"/\1/')
  wheel=$(ls "$dist"/"${dist_name//-/_}"-*.whl)
  echo "-- $dist_name alone"
  uv venv --quiet "$work/$name"
  # The plugin's declared test extra (if any) comes along; nothing else from the workspace.
  if grep -q '^test *=' "$plugin/pyproject.toml"; then
    VIRTUAL_ENV="$work/$name" uv pip install --quiet "$core_wheel" "$wheel[test]" pytest
  else
    VIRTUAL_ENV="$work/$name" uv pip install --quiet "$core_wheel" "$wheel" pytest
  fi
  (cd "$plugin" && "$work/$name/bin/python" -m pytest -q -p no:cacheprovider tests)
done

#!/usr/bin/env bash
# Checks that every C++ file of the project (src/, tests/, bench/, tools/, examples/;
# not build folders or node_modules) is clang-format clean under .clang-format. Lists the files that are not
# and exits 1; `clang-format -i FILE` fixes one. Run by CTest (test `format`).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check-format: clang-format is not installed (scripts/install-deps.sh)" >&2; exit 1; }
# find, not git: the check also runs in a copy of the tree without git (fresh-check.sh).
mapfile -t files < <(find src tests bench tools examples \( -name node_modules -o -name 'build*' \) -prune -o \
  -type f \( -name '*.cc' -o -name '*.h' \) -print | sort)
bad=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check-format: ${#bad[@]} of ${#files[@]} C++ files are not clang-format clean:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check-format: ${#files[@]} C++ files clean"

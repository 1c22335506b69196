#!/usr/bin/env bash
# Prints one of README.md's two set-up-to-result commands: the shell block between the
# <!-- seqto:NAME --> and <!-- /seqto:NAME --> markers (NAME: main or test). CI
# (.ci/run) and scripts/fresh-check.sh --readme take the commands from here, so what
# they run cannot drift from what the README tells users.
set -euo pipefail
name=${1:?usage: scripts/readme-command.sh main|test}
readme="$(dirname "$0")/../README.md"
cmd=$(sed -n "/^<!-- seqto:$name -->\$/,/^<!-- \/seqto:$name -->\$/p" "$readme" | sed -n '/^```sh$/,/^```$/p' | sed '1d;$d')
if [ -z "$cmd" ]; then
  echo "readme-command: no '$name' command between the seqto:$name markers in README.md" >&2
  exit 1
fi
printf '%s\n' "$cmd"

#!/usr/bin/env bash
# Fails if git tracks a file over 1 MiB or a compiled executable, so that no
# build output is committed. Run by `make verify`.
#
# Usage: hack/check-tracked-files.sh [REPO]    check REPO (default: this one)
#        hack/check-tracked-files.sh --self-test  prove that the check fails
#                                                 on a binary and on a big file
set -euo pipefail

max_bytes=$((1024 * 1024))

# executable_format prints the executable format of file $1, if it has one.
executable_format() {
  local magic
  magic=$(head -c 4 "$1" | od -An -tx1 | tr -d ' \n')
  case "$magic" in
    7f454c46) echo ELF ;;
    feedface|feedfacf|cefaedfe|cffaedfe|cafebabe) echo Mach-O ;;
    4d5a*) echo PE ;;
  esac
}

check() {
  local repo=$1 bad=0 f size format
  while IFS= read -r -d '' f; do
    [ -f "$repo/$f" ] || continue
    size=$(stat -c %s "$repo/$f")
    if [ "$size" -gt "$max_bytes" ]; then
      echo "tracked file over 1 MiB: $f ($size bytes)"; bad=1
    fi
    format=$(executable_format "$repo/$f")
    if [ -n "$format" ]; then
      echo "tracked compiled binary ($format): $f"; bad=1
    fi
  done < <(git -C "$repo" ls-files -z)
  if [ "$bad" -ne 0 ]; then
    echo "remove them with 'git rm --cached FILE' and add build outputs to .gitignore" >&2
  fi
  return "$bad"
}

self_test() {
  local dir
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' RETURN
  git -C "$dir" init -q
  echo "package main" > "$dir/main.go"
  git -C "$dir" add main.go
  check "$dir" >/dev/null 2>&1 || { echo "self-test: a clean tree was refused"; return 1; }

  cp "$(command -v git)" "$dir/tool"
  git -C "$dir" add tool
  if check "$dir" >/dev/null 2>&1; then echo "self-test: a tracked binary passed"; return 1; fi
  git -C "$dir" rm -q --cached tool

  head -c $((max_bytes + 1)) /dev/zero | tr '\0' 'a' > "$dir/big.txt"
  git -C "$dir" add big.txt
  if check "$dir" >/dev/null 2>&1; then echo "self-test: a file over 1 MiB passed"; return 1; fi
  echo "check-tracked-files self-test: a binary and a file over 1 MiB are refused"
}

case "${1:-}" in
  --self-test) self_test ;;
  *) check "${1:-$(git rev-parse --show-toplevel)}" ;;
esac

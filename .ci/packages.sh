#!/usr/bin/env bash
# Prints the Debian packages of .ci/packages that a line names, one per line:
# `packages.sh build`, `packages.sh test` or `packages.sh all` (build, test, and each
# `command:` line's package when its command is not on PATH); `packages.sh bare` (build,
# test and every `command:` package: a bare root has none of them); `packages.sh tools` (the
# commands the tests run). CERTRENEWD_PACKAGES names another list (to show the bare-root
# build failing with a package left out).
set -euo pipefail
list=${CERTRENEWD_PACKAGES:-$(dirname "$0")/packages}
case ${1:-all} in
    build | test | tools) want=$1 ;;
    all | bare) want='build|test' ;;
    *) echo "usage: packages.sh build|test|all|bare|tools" >&2; exit 2 ;;
esac
sed -nE "s/^($want):[[:space:]]*//p" "$list" | tr -s ' \t' '\n\n' | sed '/^$/d'
case ${1:-all} in
    all) sed -nE 's/^command:[[:space:]]*//p' "$list" | while read -r cmd pkg; do
        command -v "$cmd" >/dev/null || echo "$pkg"
    done ;;
    bare) sed -nE 's/^command:[[:space:]]*[^[:space:]]+[[:space:]]+//p' "$list" ;;
esac

#!/usr/bin/env bash
# Prints the Debian packages of .ci/packages that a line names, one per line:
# `packages.sh build`, `packages.sh test` or `packages.sh all` (build, test, and each
# `command:` line's package when its command is not on PATH). CERTRENEWD_PACKAGES names
# another list (to show the bare-root build failing with a package left out).
set -euo pipefail
list=${CERTRENEWD_PACKAGES:-$(dirname "$0")/packages}
case ${1:-all} in
    build | test) want=$1 ;;
    all) want='build|test' ;;
    *) echo "usage: packages.sh build|test|all" >&2; exit 2 ;;
esac
sed -nE "s/^($want):[[:space:]]*//p" "$list" | tr -s ' \t' '\n\n' | sed '/^$/d'
if [[ ${1:-all} == all ]]; then
    sed -nE 's/^command:[[:space:]]*//p' "$list" | while read -r cmd pkg; do
        command -v "$cmd" >/dev/null || echo "$pkg"
    done
fi

#!/usr/bin/env bash
# Installs the Debian packages named in .ci/packages that are missing (needs root), then the
# one Python module the metrics test uses.
#
#   deps.sh            every line (build and test): what .ci/run and tests/demo.sh need
#   deps.sh build      only the build line
set -euo pipefail
cd "$(dirname "$0")"
mapfile -t pkgs < <(bash ./packages.sh "${1:-all}")
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "installing: ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    # The tests want promtool, not a Prometheus server, and a containerd of their own, not
    # the machine's: these packages' services are kept from starting (policy-rc.d) and
    # disabled (on the files, not through systemd).
    quiet=()
    for p in prometheus:prometheus.service containerd:containerd.service; do
        [[ " ${missing[*]} " == *" ${p%%:*} "* ]] && quiet+=("${p#*:}")
    done
    policy=
    if ((${#quiet[@]})) && [[ ! -e /usr/sbin/policy-rc.d ]]; then
        policy=/usr/sbin/policy-rc.d
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy"
        trap 'rm -f "$policy"' EXIT
    fi
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    for unit in "${quiet[@]}"; do
        systemctl --root=/ disable "$unit" >/dev/null 2>&1 || true
    done
fi
[[ ${1:-all} == build ]] && exit 0
# The reference Prometheus exposition parser, for the metrics test: Debian's package gives
# it to /usr/bin/python3; a python3 of its own (pyenv) first on PATH gets it from PyPI.
python3 -c "import prometheus_client" 2>/dev/null || python3 -m pip install -q --root-user-action=ignore prometheus_client

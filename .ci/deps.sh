#!/usr/bin/env bash
# Installs the Debian packages the tests and the demo use, when missing (needs root).
set -euo pipefail
pkgs=(openssl golang-cfssl etcd-server etcd-client dbus dbus-user-session systemd util-linux procps strace man-db
    faketime debootstrap systemd-container iproute2
    protobuf-compiler)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "installing: ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# kubectl, to check that renewed kubeconfig files still parse (any kubectl will do).
command -v kubectl >/dev/null || { apt-get update -qq; apt-get install -y -qq --no-install-recommends kubernetes-client >/dev/null; }
# The reference Prometheus exposition parser, for the metrics test.
python3 -c "import prometheus_client" 2>/dev/null || python3 -m pip install -q --root-user-action=ignore prometheus_client

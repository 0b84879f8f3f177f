#!/usr/bin/env bash
# benches/ha-reload.sh - the yearly renewal of a 3-controller kubeadm cluster, restarted and
# reloaded: three Debian controllers booted with systemd as PID 1
# (tests/controllers/common/controllers.rs), formed as kubeadm forms them (init, then join),
# etcd a static pod run by the kubelet stand-in from kubeadm's manifest, every etcd leaf due
# (issued 355 days ago for 365 days); certrenewd's .deb on each, the three daemons started in
# the same second. Once with the shipped configuration (every member's pod restarted in
# turn), once with `on_renew = "reload"` for /etc/kubernetes/pki. Prints, for each, the
# members restarted, the pods kept, the fewest healthy members and failed writes a probe
# writing every 200 ms saw, its longest write outage and the passes' wall time; then the
# ratios restart / reload.
#
#   bash benches/ha-reload.sh [RUNS]      (default 1; as root, like the booted-controller tests)
#
# Runs the ignored test `bench_yearly_renewal_restart_vs_reload` of
# tests/controllers/kubeadm_ha.rs RUNS times. Uses $CERTRENEWD_DEB when set, else builds the
# .deb of this checkout (a release build: minutes).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source benches/ha-lib.sh
ha_bench kubeadm_ha::bench_yearly_renewal_restart_vs_reload '^(BENCH|probe:)' "${1:-1}"

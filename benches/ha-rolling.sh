#!/usr/bin/env bash
# benches/ha-rolling.sh - the HA benchmark: three Debian controllers booted with systemd as
# PID 1 (tests/controllers/common/controllers.rs) form a 3-member etcd cluster with mutual TLS, every
# certificate due; certrenewd's .deb on each with [coordination] on; all three daemons start in
# the same second. Measures the wall time of the rolling renewal (first start to the last
# pass's end) against one node's pass (`certrenewd renew --force` of its three certificates on node1 afterwards, the same
# lock and gate), and the longest write outage a probe writing every 200 ms saw in each.
#
#   bash benches/ha-rolling.sh [RUNS]      (default 1; as root, like the booted-controller tests)
#
# Runs the ignored test `bench_rolling_renewal` of tests/controllers/ha.rs RUNS times and
# prints its `BENCH key=value` lines, one block per run. Uses $CERTRENEWD_DEB when set, else
# builds the .deb of this checkout (a release build: minutes).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source benches/ha-lib.sh
ha_bench ha::bench_rolling_renewal '^(BENCH|probe:)' "${1:-1}"

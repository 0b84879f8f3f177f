#!/usr/bin/env bash
# benches/ha-recovery.sh - recovery from a full outage: three Debian controllers booted with
# systemd as PID 1 (tests/controllers/common/controllers.rs) form a 3-member etcd cluster with mutual TLS
# whose every certificate expired while it was off (no member can reach another); certrenewd's
# .deb on each with [coordination] on (gate_timeout_secs 60); all three daemons start in the
# same second. Measures the time from the first start until every member is healthy (a probe
# asking each member every 200 ms) and every certificate renewed, the passes it took, and
# what the journals say of the waits (gate_timeout_secs waited out, the lock given up for a
# member that is down, members started at once, restarts without the lock).
#
#   bash benches/ha-recovery.sh [RUNS]     (default 1; as root, like the booted-controller tests)
#
# Runs the ignored test `bench_recovery_everything_expired` of tests/controllers/ha.rs RUNS
# times and prints its `BENCH key=value` lines, one block per run; then as many runs of
# `bench_recovery_everything_expired_members_failed`, where every member crash-looped on its
# expired certificates until systemd's start limit before the daemons start (every
# etcd.service failed, nothing listening; `BENCH members_before=` tells the two apart).
# Uses $CERTRENEWD_DEB when set, else builds the .deb of this checkout (a release build:
# minutes).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source benches/ha-lib.sh
keep='^(BENCH|ha recovery:|node[0-9]: )' rc=0
ha_bench ha::bench_recovery_everything_expired "$keep" "${1:-1}" || rc=1
ha_bench ha::bench_recovery_everything_expired_members_failed "$keep" "${1:-1}" || rc=1
exit $rc

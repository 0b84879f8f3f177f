#!/usr/bin/env bash
# benches/check-limit.sh - `certrenewd check` at the speed limit: a 10,010-certificate
# tree (10 CAs, P-256 and RSA 2048 in turn; half the leaf keys RSA 2048, half P-256; half the
# leaves due), `check` run RUNS times with no record of checked signatures in state_dir, then
# RUNS times after a renewal pass (that renews nothing) recorded them, as on a node whose
# daemon runs; and the verification floor beside it: the CPU time of checking each leaf's
# signature once, with its CA's key parsed once (benches/check_floor.rs). Prints the medians, the ratios and the targets; changes nothing
# outside temp directories and the tree cache. See benches/README.md.
#
#   bash benches/check-limit.sh            # as root or not; about 2 min with the tree cached
#
# Knobs: BENCH_LIMIT_RUNS (11), BENCH_LIMIT_COUNT (10000 leaves), BENCH_LIMIT_CAS (10),
# BENCH_LIMIT_BIN (a certrenewd binary to measure instead of this checkout's release build),
# BENCH_CACHE and BENCH_CACHE_MAX_DAYS as for benches/run.sh.
set -euo pipefail
export LC_ALL=C

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
TOP=$(cd "$HERE/.." && pwd -P)
cd "$TOP"
PROG=benches/check-limit.sh
die() { printf '%s: %s\n' "$PROG" "$*" >&2; exit 1; }
say() { printf '%s: %s\n' "$PROG" "$*" >&2; }

RUNS=${BENCH_LIMIT_RUNS:-11}
COUNT=${BENCH_LIMIT_COUNT:-10000}
CAS=${BENCH_LIMIT_CAS:-10}
CACHE=${BENCH_CACHE:-${TMPDIR:-/tmp}/certrenewd-bench-cache}
CACHE_MAX_DAYS=${BENCH_CACHE_MAX_DAYS:-4}
# The targets set for `check` at the speed limit (two cores).
T_WALL=0.4 T_RATIO=1.3 T_RSS_MIB=40

for n in "$RUNS" "$COUNT" "$CAS"; do [[ $n =~ ^[1-9][0-9]*$ ]] || die "bad number '$n'"; done
[[ -x /usr/bin/time ]] || die "/usr/bin/time (GNU time) not found: it measures the peak RSS"
for t in openssl cargo python3; do command -v "$t" >/dev/null || die "$t not found"; done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/certrenewd-limit.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# certrenewd must never reach the machine's buses or journald stream
export DBUS_SYSTEM_BUS_ADDRESS=unix:path=$WORK/no-system-bus
export DBUS_SESSION_BUS_ADDRESS=unix:path=$WORK/no-session-bus
unset JOURNAL_STREAM NOTIFY_SOCKET WATCHDOG_USEC WATCHDOG_PID CERTRENEWD_CONFIG GLIBC_TUNABLES || true

# ---------------------------------------------------------------- build
if [[ -n ${BENCH_LIMIT_BIN:-} ]]; then
    BIN=$BENCH_LIMIT_BIN
else
    say "cargo build --release"
    cargo build --release --quiet 2>"$WORK/build.log" || { cat "$WORK/build.log" >&2; die "build failed"; }
    BIN=$TOP/target/release/certrenewd
fi
[[ -x $BIN ]] || die "$BIN is not an executable"
say "cargo bench --bench check_floor --no-run"
cargo bench --bench check_floor --no-run --quiet 2>"$WORK/bench-build.log" ||
    { cat "$WORK/bench-build.log" >&2; die "build of the floor bench failed"; }
REV=$(git -C "$TOP" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$TOP" diff --quiet HEAD -- src Cargo.toml Cargo.lock benches 2>/dev/null || REV="$REV + uncommitted changes"

# ---------------------------------------------------------------- tree (cached)
MKPKI=$TOP/tests/fixtures/mkpki.sh
TREE=$CACHE/$(sha256sum <"$MKPKI" | cut -c1-12)/limit-$COUNT-$CAS
if ! [[ -f $TREE/.made && $(($(date +%s) - $(cat "$TREE/.made"))) -lt $((CACHE_MAX_DAYS * 86400)) ]]; then
    rm -rf "$TREE" "$TREE.tmp"
    mkdir -p "$(dirname "$TREE")"
    say "making the tree with mkpki.sh (a few minutes; cached in $TREE)"
    "$MKPKI" bench "$TREE.tmp" --count "$COUNT" --cas "$CAS" --half-rsa >&2
    date +%s >"$TREE.tmp/.made"
    mv "$TREE.tmp" "$TREE"
fi
NCERT=$(find "$TREE" -type f -name '*.crt' | wc -l)
CFG=$WORK/check.toml
{
    printf 'state_dir = "%s"\nvalidity_days = 365\nrenew_before_days = 15\n' "$WORK/state"
    while IFS=$'\t' read -r dir unit; do
        printf '\n[[watch]]\npath = "%s/%s"\nunits = ["%s"]\n' "$TREE" "$dir" "$unit"
    done <"$TREE/watch.tsv"
} >"$CFG"

# ---------------------------------------------------------------- check, RUNS times, twice
# measure NAME: `check` RUNS times under GNU time (after two untimed runs, which bring the tree
# into the page cache); sets NAME_WALL, NAME_CPU (medians), NAME_RSS (median), NAME_RSS_MAX.
measure() {
    local name=$1 i wall cpu rss rss_max
    "$BIN" --config "$CFG" check >/dev/null 2>&1 || true
    "$BIN" --config "$CFG" check >"$WORK/out.txt" 2>&1 || true
    say "timing check, $name ($RUNS runs)"
    rm -f "$WORK"/time.*
    for ((i = 0; i < RUNS; i++)); do
        /usr/bin/time -o "$WORK/time.$i" -f '%e %U %S %M' "$BIN" --config "$CFG" check >/dev/null 2>&1 || true
    done
    # median wall, median user+sys, median and largest peak RSS
    read -r wall cpu rss rss_max < <(cat "$WORK"/time.* | python3 -c '
import statistics, sys
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
print(statistics.median(r[0] for r in rows), statistics.median(r[1] + r[2] for r in rows),
      statistics.median(r[3] for r in rows) / 1024, max(r[3] for r in rows) / 1024)')
    printf -v "${name}_WALL" %s "$wall"
    printf -v "${name}_CPU" %s "$cpu"
    printf -v "${name}_RSS" %s "$rss"
    printf -v "${name}_RSS_MAX" %s "$rss_max"
}
# 1. No record of checked signatures in state_dir: every signature is checked (a node whose
#    daemon has not run a pass yet, or `check` by a user who cannot read state_dir).
measure COLD
[[ ! -e $WORK/state/checked-signatures ]] || die "check wrote state_dir/checked-signatures"
# 2. What an operator meets on a node where the daemon runs: its last pass recorded the
#    signatures it checked. A renewal pass that renews nothing (the same watches with a
#    1-day window, so the cached tree stays as made) records them, as the daemon's would.
sed 's/^renew_before_days = 15$/renew_before_days = 1/' "$CFG" >"$WORK/pass.toml"
CERTRENEWD_JOURNAL_SOCKET=$WORK/no-journal "$BIN" --config "$WORK/pass.toml" renew --no-restart >"$WORK/pass.txt" 2>&1 ||
    { cat "$WORK/pass.txt" >&2; die "the recording pass failed"; }
grep -q 'none due' "$WORK/pass.txt" || { cat "$WORK/pass.txt" >&2; die "the recording pass renewed something"; }
[[ -s $WORK/state/checked-signatures ]] || say "the pass recorded no signatures (a build before the record?)"
measure WARM
WALL=$WARM_WALL CPU=$WARM_CPU RSS=$WARM_RSS RSS_MAX=$WARM_RSS_MAX

# ---------------------------------------------------------------- the floor
say "verification floor (benches/check_floor.rs)"
cargo bench --bench check_floor --quiet -- "$TREE" 5 >"$WORK/floor.txt" 2>"$WORK/floor.log" ||
    { cat "$WORK/floor.log" >&2; die "floor bench failed"; }
get() { sed -n "s/^$1=//p" "$WORK/floor.txt"; }
FLOOR=$(get floor_cpu_s) FLOOR_PAR=$(get floor_par_cpu_s) FLOOR_PAR_WALL=$(get floor_par_wall_s)

verdict() { if awk "BEGIN { exit !($1) }"; then echo met; else echo MISSED; fi; }
RATIO=$(awk -v c="$CPU" -v f="$FLOOR" 'BEGIN { printf "%.2f", c / f }')
RATIO_COLD=$(awk -v c="$COLD_CPU" -v f="$FLOOR" 'BEGIN { printf "%.2f", c / f }')
RATIO_PAR=$(awk -v c="$CPU" -v f="$FLOOR_PAR" 'BEGIN { printf "%.2f", c / f }')
cat <<OUT
check-limit: $(date -u +%Y-%m-%d) at $REV, $(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)), load average at the end $(cut -d' ' -f1-3 /proc/loadavg)
tree: $NCERT certificates ($CAS CAs, $COUNT leaves), $(tail -1 "$WORK/out.txt")
check, no record of checked signatures (median of $RUNS): wall $(printf %.3f "$COLD_WALL") s, CPU (user+sys) $(printf %.3f "$COLD_CPU") s, peak RSS $(printf %.1f "$COLD_RSS") MiB (largest $(printf %.1f "$COLD_RSS_MAX") MiB); CPU / floor $RATIO_COLD
check after a pass recorded them (median of $RUNS): wall $(printf %.3f "$WALL") s, CPU (user+sys) $(printf %.3f "$CPU") s, peak RSS $(printf %.1f "$RSS") MiB (largest $(printf %.1f "$RSS_MAX") MiB)
floor: $FLOOR s CPU on one thread; $FLOOR_PAR s CPU ($FLOOR_PAR_WALL s wall) on all CPUs
ratios, after a pass: CPU / floor $RATIO (CPU / floor on all CPUs $RATIO_PAR)
targets, after a pass: wall < $T_WALL s: $(verdict "$WALL < $T_WALL")
target CPU <= $T_RATIO x floor: $(verdict "$CPU <= $T_RATIO * $FLOOR")
target peak RSS < $T_RSS_MIB MiB: $(verdict "$RSS_MAX < $T_RSS_MIB")
OUT

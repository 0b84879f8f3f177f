# benches/ha-lib.sh - sourced by the booted-controller benchmarks (ha-rolling.sh,
# ha-recovery.sh, ha-reload.sh), which differ only in the ignored test of
# tests/controllers/ they run (`module::name`) and the lines of its output they keep.
#
#   ha_bench TEST KEEP RUNS   runs TEST RUNS times (as root; $CERTRENEWD_DEB names the .deb,
#                             else the test builds the checkout's) and prints, per run, a
#                             header and the output lines matching the extended regex KEEP;
#                             fails when a run failed.
ha_bench() {
    local test=$1 keep=$2 runs=$3 failed=0 i out
    for ((i = 1; i <= runs; i++)); do
        echo "# run $i of $runs, $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
        out=$(cargo test --quiet --test controllers -- --ignored --exact "$test" \
            --nocapture 2>&1) || {
            # A failed run gives no figures; it is counted and shown, not hidden.
            failed=$((failed + 1))
            printf '%s\n' "$out" | grep -E 'panicked|^node[0-9]: .*FAILED' -A1 | head -n 6
            echo "# run $i failed"
            continue
        }
        printf '%s\n' "$out" | grep -E "$keep"
    done
    echo "# $runs runs, $failed failed"
    ((failed == 0))
}

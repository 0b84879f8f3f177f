#!/usr/bin/env bash
# benches/run.sh - certrenewd's benchmarks, in one run: builds the release binary, measures
# check / renew / the daemon against the openssl CLI baselines operators use today (and
# certmonger when it can be driven locally), prints a table and writes it to
# benches/RESULTS.md (BENCH_QUICK=1: benches/RESULTS-quick.md). See benches/README.md.
#
# Everything happens in temp directories: the PKI trees (tests/fixtures/mkpki.sh) are cached
# in $BENCH_CACHE across runs; every renew run works on a fresh copy; certrenewd gets a private
# state_dir and never sees a real D-Bus bus (DBUS_*_BUS_ADDRESS point to a temp path where
# nothing listens). Processes this script starts are stopped by their PID.
set -euo pipefail
export LC_ALL=C

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
TOP=$(cd "$HERE/.." && pwd -P)
cd "$TOP"
PROG=benches/run.sh
die() { printf '%s: %s\n' "$PROG" "$*" >&2; exit 1; }
say() { printf '%s: %s\n' "$PROG" "$*" >&2; }

# ---------------------------------------------------------------- knobs
QUICK=${BENCH_QUICK:-0}
if [[ $QUICK == 1 ]]; then
    d_sizes="100 1000" d_renew=100 d_runs=3 d_slow=1 d_rruns=1 d_idle=5 d_cm=3
    d_out=benches/RESULTS-quick.md
else
    d_sizes="100 1000 10000" d_renew=1000 d_runs=5 d_slow=3 d_rruns=5 d_idle=60 d_cm=10
    d_out=benches/RESULTS.md
fi
SIZES=${BENCH_SIZES:-$d_sizes}               # bench tree sizes for check / renew / READY
RENEW_SIZE=${BENCH_RENEW_SIZE:-$d_renew}     # bench tree compared with the openssl renew script
DAEMON_SIZE=${BENCH_DAEMON_SIZE:-1000}       # tree for the daemon's RSS / idle CPU
RUNS=${BENCH_RUNS:-$d_runs}                  # runs of fast commands (median taken)
SLOW_RUNS=${BENCH_SLOW_RUNS:-$d_slow}        # runs of the openssl loops and renew scripts
RENEW_RUNS=${BENCH_RENEW_RUNS:-$d_rruns}     # runs of every certrenewd renew measurement
IDLE=${BENCH_IDLE_SECS:-$d_idle}             # idle period for the daemon's CPU time
CM_COUNT=${BENCH_CERTMONGER_COUNT:-$d_cm}    # certificates for certmonger (0: skip it)
CACHE=${BENCH_CACHE:-${TMPDIR:-/tmp}/certrenewd-bench-cache}
OUT=${BENCH_OUT:-$d_out}
CACHE_MAX_DAYS=${BENCH_CACHE_MAX_DAYS:-4}    # trees older than this are made again
WINDOW_DAYS=15

for n in $SIZES $RENEW_SIZE $DAEMON_SIZE; do [[ $n =~ ^[1-9][0-9]*$ ]] || die "bad size '$n'"; done
# DAEMON_SIZE and RENEW_SIZE need their trees too
ALL_SIZES=$(printf '%s\n' $SIZES $RENEW_SIZE $DAEMON_SIZE | sort -n -u | paste -sd' ')

CMDLINE="bash benches/run.sh"
for v in BENCH_QUICK BENCH_SIZES BENCH_RENEW_SIZE BENCH_DAEMON_SIZE BENCH_RUNS BENCH_SLOW_RUNS \
    BENCH_RENEW_RUNS BENCH_IDLE_SECS BENCH_CERTMONGER_COUNT BENCH_CACHE BENCH_OUT; do
    [[ -z ${!v:-} ]] || CMDLINE="$v=${!v} $CMDLINE"
done

for t in openssl python3 cargo; do command -v "$t" >/dev/null || die "$t not found"; done

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/certrenewd-bench.XXXXXX")
cleanup() { rm -rf "$WORK"; }
trap cleanup EXIT
# certrenewd must never reach the machine's buses or journald stream
export DBUS_SYSTEM_BUS_ADDRESS=unix:path=$WORK/no-system-bus
export DBUS_SESSION_BUS_ADDRESS=unix:path=$WORK/no-session-bus
unset JOURNAL_STREAM NOTIFY_SOCKET WATCHDOG_USEC WATCHDOG_PID CERTRENEWD_CONFIG || true

# ---------------------------------------------------------------- timing
HF=
if command -v hyperfine >/dev/null; then
    HF=hyperfine
elif [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    say "installing hyperfine (Debian package)"
    if apt-get install -y hyperfine >"$WORK/apt.log" 2>&1 ||
        { apt-get update >>"$WORK/apt.log" 2>&1 && apt-get install -y hyperfine >>"$WORK/apt.log" 2>&1; }; then
        HF=hyperfine
    else
        say "hyperfine not installable; timing with date +%s%N"
    fi
fi

declare -A MED CPU
# measure ID RUNS WARMUP PREPARE CMD: MED[ID] = median wall seconds, CPU[ID] = mean user+sys
# seconds (hyperfine only; "" otherwise). PREPARE runs untimed before every run.
measure() {
    local id=$1 runs=$2 warm=$3 prep=$4 cmd=$5
    say "timing $id ($runs runs)"
    if [[ -n $HF ]]; then
        local json=$WORK/hf-$id.json
        local args=(--shell=bash --runs "$runs" --warmup "$warm" --style none --export-json "$json")
        [[ -z $prep ]] || args+=(--prepare "$prep")
        if ! hyperfine "${args[@]}" "$cmd" >"$WORK/hf-$id.log" 2>&1; then
            cat "$WORK/hf-$id.log" >&2
            die "benchmark $id failed: $cmd"
        fi
        local r
        r=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print(r["median"], r["user"]+r["system"])' "$json")
        MED[$id]=${r% *} CPU[$id]=${r#* }
    else
        local i t0 t1 times=()
        for ((i = 0; i < warm + runs; i++)); do
            [[ -z $prep ]] || bash -c "$prep" >/dev/null 2>&1 || die "prepare of $id failed"
            t0=$(date +%s%N)
            bash -c "$cmd" >/dev/null 2>&1 || die "benchmark $id failed: $cmd"
            t1=$(date +%s%N)
            ((i < warm)) || times+=($((t1 - t0)))
        done
        MED[$id]=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.6f", m/1e9}')
        CPU[$id]=
    fi
}
# formatting helpers
ft() {   # seconds -> human
    awk -v s="$1" 'BEGIN { if (s == "") { print "n/a"; exit }
        if (s < 0.001) printf "%.0f µs", s*1e6; else if (s < 1) printf "%.1f ms", s*1e3;
        else if (s < 100) printf "%.2f s", s; else printf "%.0f s", s }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "n/a"; else if (a/b >= 10) printf "%.0fx", a/b; else printf "%.1fx", a/b }'; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b) }'; }
verdict() { if "$@"; then echo "met"; else echo "**MISSED**"; fi; }

# ---------------------------------------------------------------- build
say "cargo build --release"
cargo build --release --quiet 2>"$WORK/build.log" || { cat "$WORK/build.log" >&2; die "build failed"; }
BIN=$TOP/target/release/certrenewd
[[ -x $BIN ]] || die "$BIN missing after the build"
# what was built (others may commit while the benchmarks run)
REV=$(git -C "$TOP" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$TOP" diff --quiet HEAD -- src Cargo.toml Cargo.lock .cargo 2>/dev/null ||
    REV="$REV + uncommitted changes"

# ---------------------------------------------------------------- trees (cached)
MKPKI=$TOP/tests/fixtures/mkpki.sh
gen_key=$(sha256sum <"$MKPKI" | cut -c1-12)
TREES=$CACHE/$gen_key
mkdir -p "$TREES"
fresh() {   # fresh DIR: made within CACHE_MAX_DAYS
    [[ -f $1/.made ]] && (($(date +%s) - $(cat "$1/.made") < CACHE_MAX_DAYS * 86400))
}
tree() {   # tree NAME -> path of a complete cached tree (made if needed)
    local name=$1 dir=$TREES/$1
    if ! fresh "$dir"; then
        rm -rf "$dir" "$dir.tmp"
        say "making $name with mkpki.sh (cached in $TREES)"
        case $name in
            kubeadm) "$MKPKI" kubeadm "$dir.tmp" >&2 ;;
            bench-*) "$MKPKI" bench "$dir.tmp" --count "${name#bench-}" >&2 ;;
        esac
        date +%s >"$dir.tmp/.made"
        mv "$dir.tmp" "$dir"
    fi
    printf '%s' "$dir"
}
plan() {   # plan NAME -> openssl baseline plan for tree NAME (cached)
    local dir
    dir=$(tree "$1")
    if [[ ! -s $dir.plan/plan.tsv || $dir.plan/plan.tsv -ot $dir/.made || $dir.plan/plan.tsv -ot $HERE/openssl-plan.py ]]; then
        rm -rf "$dir.plan"
        mkdir -p "$dir.plan"
        python3 "$HERE/openssl-plan.py" "$dir" "$dir.plan/plan.tsv" "$dir.plan/ext" 2>/dev/null
    fi
    printf '%s' "$dir.plan/plan.tsv"
}
# config TREE STATE [EXTRA [SRC]] : a certrenewd config for TREE, one [[watch]] per line of
# SRC/watch.tsv (SRC: the pristine tree TREE is a copy of; default TREE)
config() {
    local tree=$1 state=$2 extra=${3:-} src=${4:-$1} dir unit
    printf 'state_dir = "%s"\nvalidity_days = 365\nrenew_before_days = %s\n%s\n' "$state" "$WINDOW_DAYS" "$extra"
    while IFS=$'\t' read -r dir unit; do
        printf '\n[[watch]]\npath = "%s/%s"\nunits = ["%s"]\n' "$tree" "$dir" "$unit"
    done <"$src/watch.tsv"
}
count_not_ok() {   # count_not_ok CONFIG -> number of certificates whose status is not ok
    "$BIN" --config "$1" check --output json |
        python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(c["status"]!="ok" for c in d["certificates"]))'
}
count_certs() { find "$1" -type f \( -name '*.crt' -o -name '*.pem' \) | wc -l; }

for n in $ALL_SIZES; do tree "bench-$n" >/dev/null; done
tree kubeadm >/dev/null

# ---------------------------------------------------------------- 1. check vs the openssl loop
LOOP='for f in $(find DIR -name '"'"'*.crt'"'"' -o -name '"'"'*.pem'"'"'); do openssl x509 -checkend $((15*86400)) -noout -in "$f"; done'
declare -A NCERT DUE_C DUE_O
for n in $SIZES; do
    t=$(tree "bench-$n")
    cfg=$WORK/check-$n.toml
    config "$t" "$WORK/state-check-$n" >"$cfg"
    NCERT[$n]=$(count_certs "$t")
    measure "check-$n" "$RUNS" 1 "" "'$BIN' --config '$cfg' check >/dev/null"
    measure "loop-$n" "$SLOW_RUNS" 0 "" "${LOOP//DIR/$t} >'$WORK/loop-$n.out' 2>&1; true"
    DUE_C[$n]=$(count_not_ok "$cfg")
    DUE_O[$n]=$(grep -c '^Certificate will expire' "$WORK/loop-$n.out" || true)
done

# ---------------------------------------------------------------- 2. renew vs the openssl script
RUN=$WORK/run
declare -A NRENEWED SANITY
renew_bench() {   # renew_bench ID SRC-TREE MODE(certrenewd|certrenewd-rotate|openssl|openssl-rotate) [PLAN]
    local id=$1 src=$2 mode=$3 planf=${4:-} cfg=$WORK/renew-$1.toml extra= cmd
    [[ $mode != *rotate ]] || extra='rotate_keys = true'
    config "$RUN/tree" "$RUN/state" "$extra" "$src" >"$cfg"
    local prep="rm -rf '$RUN' && mkdir -p '$RUN' && cp -a '$src' '$RUN/tree' && sync"
    case $mode in
        certrenewd*) cmd="'$BIN' --config '$cfg' renew --no-restart >/dev/null" ;;
        openssl) cmd="bash '$HERE/openssl-renew.sh' '$planf' '$RUN/tree'" ;;
        openssl-rotate) cmd="bash '$HERE/openssl-renew.sh' '$planf' '$RUN/tree' --rotate" ;;
    esac
    local runs=$RENEW_RUNS
    [[ $mode != openssl* ]] || runs=$SLOW_RUNS
    measure "$id" "$runs" 0 "$prep" "$cmd"
    # the last run's tree: everything must be ok now
    local left
    left=$(count_not_ok "$cfg")
    SANITY[$id]=$left
    [[ $left == 0 ]] || say "WARNING: $id left $left certificates not ok"
}
KUBEADM=$(tree kubeadm)
NRENEWED[kubeadm]=$(config "$KUBEADM" "$WORK/state-k" >"$WORK/k.toml"; count_not_ok "$WORK/k.toml")
renew_bench renew-kubeadm "$KUBEADM" certrenewd
renew_bench renew-rot-kubeadm "$KUBEADM" certrenewd-rotate
renew_bench ossl-kubeadm "$KUBEADM" openssl "$(plan kubeadm)"
renew_bench ossl-rot-kubeadm "$KUBEADM" openssl-rotate "$(plan kubeadm)"
R=$RENEW_SIZE
RT=$(tree "bench-$R")
NRENEWED[$R]=$(config "$RT" "$WORK/state-r" >"$WORK/r.toml"; count_not_ok "$WORK/r.toml")
renew_bench "renew-$R" "$RT" certrenewd
renew_bench "renew-rot-$R" "$RT" certrenewd-rotate
renew_bench "ossl-$R" "$RT" openssl "$(plan "bench-$R")"
renew_bench "ossl-rot-$R" "$RT" openssl-rotate "$(plan "bench-$R")"
for n in $SIZES; do
    [[ $n == "$R" ]] && continue
    t=$(tree "bench-$n")
    NRENEWED[$n]=$(config "$t" "$WORK/state-s$n" >"$WORK/s$n.toml"; count_not_ok "$WORK/s$n.toml")
    renew_bench "renew-$n" "$t" certrenewd
done

# where renew's time goes: CPU vs wall, and fsync (strace -w -c: wall time inside syscalls)
STRACE_SUMMARY=
if command -v strace >/dev/null; then
    rm -rf "$RUN" && mkdir -p "$RUN" && cp -a "$RT" "$RUN/tree" && sync
    if strace -f -w -c -o "$WORK/strace.txt" "$BIN" --config "$WORK/renew-renew-$R.toml" renew --no-restart >/dev/null 2>&1; then
        STRACE_SUMMARY=$(awk '$NF ~ /^(fsync|fdatasync|syncfs|rename|renameat2?|openat|write|read|mkdir|getdents64)$/ {
            printf "%s: %d calls, %.3f s; ", $NF, $4, $2 }' "$WORK/strace.txt")
    fi
fi

# ---------------------------------------------------------------- 4. daemon
# The daemon is measured with the Environment= assignments of the shipped unit file (as it
# runs in production, e.g. GLIBC_TUNABLES), and once more without them for comparison.
UNIT_ENV=()
if [[ -f $TOP/systemd/certrenewd.service ]]; then
    while read -r -a words; do
        for w in "${words[@]}"; do
            w=${w//\"/}
            if [[ $w == *=* ]]; then UNIT_ENV+=("$w"); fi
        done
    done < <(sed -n 's/^Environment=//p' "$TOP/systemd/certrenewd.service")
fi
declare -A READY RSS_READY
for n in $ALL_SIZES; do
    t=$(tree "bench-$n")
    cfg=$WORK/daemon-ready-$n.toml
    config "$t" "$WORK/state-d$n" 'run_on_start = false' >"$cfg"
    say "daemon: READY=1 with bench-$n ($RUNS runs)"
    vals=()
    for ((i = 0; i < RUNS; i++)); do
        out=$(env "${UNIT_ENV[@]}" python3 "$HERE/daemon-probe.py" "$BIN" "$cfg" ready) || die "daemon probe failed: $out"
        vals+=("$(sed -n 's/^ready_ms=//p' <<<"$out")")
    done
    RSS_READY[$n]=$(sed -n 's/^rss_ready_kib=//p' <<<"$out")
    READY[$n]=$(printf '%s\n' "${vals[@]}" | sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.6f", m/1000}')
done
D=$DAEMON_SIZE
# units = []: no unit to restart, so the first pass succeeds without any systemd (the
# renewals, backups, state and alarms are all done); the bus connection fails fast on the
# temp address above.
config "$RUN/tree" "$RUN/state" 'run_on_start = true' "$(tree "bench-$D")" | sed 's/^units = .*/units = []/' >"$WORK/daemon-pass.toml"
daemon_pass() {   # daemon_pass IDLE [VAR=VALUE...]: a first pass over a fresh copy
    local idle=$1
    shift
    rm -rf "$RUN" && mkdir -p "$RUN" && cp -a "$(tree "bench-$D")" "$RUN/tree" && sync
    env "$@" python3 "$HERE/daemon-probe.py" "$BIN" "$WORK/daemon-pass.toml" pass "$idle"
}
say "daemon: first pass with bench-$D, then ${IDLE}s idle (unit environment: ${UNIT_ENV[*]:-none})"
DP=$(daemon_pass "$IDLE" "${UNIT_ENV[@]}") || die "daemon probe failed: $DP"
dv() { sed -n "s/^$1=//p" <<<"$DP"; }
D_PASS=$(awk -v m="$(dv pass_ms)" 'BEGIN { printf "%.6f", m/1000 }')
D_RESULT=$(dv pass_result) D_RSS=$(dv rss_kib) D_HWM=$(dv hwm_kib) D_THREADS=$(dv threads)
D_ANON=$(dv rss_anon_kib) D_FILE=$(dv rss_file_kib)
D_IDLE_CPU=$(dv idle_cpu_ms) D_RSS_IDLE=$(dv rss_idle_kib)
D_BARE_RSS=
if ((${#UNIT_ENV[@]})); then
    say "daemon: first pass with bench-$D without the unit's environment"
    DB=$(daemon_pass 0) || die "daemon probe failed: $DB"
    D_BARE_RSS=$(sed -n 's/^rss_kib=//p' <<<"$DB") D_BARE_ANON=$(sed -n 's/^rss_anon_kib=//p' <<<"$DB")
fi
BIN_SIZE=$(stat -c %s "$BIN")
if file "$BIN" 2>/dev/null | grep -q 'not stripped'; then
    strip -o "$WORK/certrenewd.stripped" "$BIN"
    BIN_SIZE=$(stat -c %s "$WORK/certrenewd.stripped")
fi
BIN_MIB=$(awk -v b="$BIN_SIZE" 'BEGIN { printf "%.1f", b/1048576 }')

# ---------------------------------------------------------------- 3. certmonger
CM=
if [[ $CM_COUNT -gt 0 ]]; then
    say "certmonger: $CM_COUNT certificates with its local CA"
    CM=$(bash "$HERE/certmonger-probe.sh" "$CACHE" "$WORK/certmonger" "$CM_COUNT" 2>&1) || true
fi
cv() { sed -n "s/^$1=//p" <<<"$CM" | head -1; }

# ---------------------------------------------------------------- report
CPU_MODEL=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
MEM=$(awk '/^MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)
FS=$(df -PT "$WORK" | awk 'NR==2 {print $2}')
TIMER=${HF:+$(hyperfine --version)}
TIMER=${TIMER:-bash date +%s%N}

per() { awk -v t="$1" -v n="$2" 'BEGIN { if (n == 0 || t == "") print "n/a"; else { s=t/n; if (s < 0.001) printf "%.0f µs", s*1e6; else if (s < 1) printf "%.2f ms", s*1e3; else printf "%.2f s", s } }'; }
expo() {   # growth exponent between two (size, time) points: 1 = linear
    awk -v t1="$1" -v t2="$2" -v n1="$3" -v n2="$4" 'BEGIN { printf "%.2f", log(t2/t1)/log(n2/n1) }'
}

{
echo "# certrenewd benchmark results"
echo
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "- machine: $(nproc) CPUs, $CPU_MODEL, $MEM RAM, Linux $(uname -r), temp dirs on $FS"
echo "- load average (1/5/15 min) at start: $LOAD_START; at end: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine inflates wall times; CPU columns do not depend on it)"
echo "- command: \`$CMDLINE\`"
echo "- certrenewd: $REV, release build; $(openssl version | cut -d' ' -f1-2); timing: $TIMER"
echo "- every figure is the median of N runs (N in the table); renew runs each start from a fresh"
echo "  copy of the tree (copy and \`sync\` not timed); certrenewd configs set \`validity_days = 365\`"
echo
echo "## 1. check / inventory vs the openssl loop"
echo
echo "Baseline: \`for f in \$(find DIR -name '*.crt' -o -name '*.pem'); do openssl x509 -checkend \$((15*86400)) -noout -in \"\$f\"; done\`"
echo "over the same files. Target: 10,000 certificates in < 1 s, >= 20x faster than the loop."
echo
echo "| certificates | certrenewd check | its CPU (user+sys) | openssl loop | ratio | due found (certrenewd / loop) | runs | target |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
for n in $SIZES; do
    c=${MED[check-$n]} l=${MED[loop-$n]}
    tgt="ratio >= 20x: $(verdict ge "$(awk -v a="$l" -v b="$c" 'BEGIN{print a/b}')" 20)"
    [[ $n != 10000 ]] || tgt+="; < 1 s: $(verdict ge 1 "$c")"
    echo "| ${NCERT[$n]} | $(ft "$c") | $(ft "${CPU[check-$n]:-}") | $(ft "$l") | $(ratio "$l" "$c") | ${DUE_C[$n]} / ${DUE_O[$n]} | $RUNS / $SLOW_RUNS | $tgt |"
done
echo
echo "## 2. renew vs the openssl CLI script"
echo
echo "Baseline (\`benches/openssl-renew.sh\`, the StarlingX way): per leaf \`openssl x509 -checkend\`, then"
echo "\`openssl req -new -key KEY -subj ...\` + \`openssl x509 -req -CA -CAkey -days 365 -extfile ...\`"
echo "(rotation: \`openssl genpkey\` first), serially; no backup, no fsync, no verification. certrenewd:"
echo "\`renew --no-restart\` (backups, pending record, fsyncs, verification of every new certificate)."
echo "Target: >= 10x faster with key reuse."
echo
echo "| tree | renewed | certrenewd (reuse) | openssl (reuse) | ratio | certrenewd (rotate_keys) | openssl (rotate) | ratio | runs | target (reuse >= 10x) |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
for k in kubeadm "$R"; do
    a=${MED[renew-$k]} b=${MED[ossl-$k]} c=${MED[renew-rot-$k]} d=${MED[ossl-rot-$k]}
    if [[ $k == kubeadm ]]; then name="kubeadm (etc/kubernetes/pki, RSA 2048)"; else name="bench-$k"; fi
    echo "| $name | ${NRENEWED[$k]} | $(ft "$a") | $(ft "$b") | $(ratio "$b" "$a") | $(ft "$c") | $(ft "$d") | $(ratio "$d" "$c") | $RENEW_RUNS / $SLOW_RUNS | $(verdict ge "$(awk -v a="$b" -v b="$a" 'BEGIN{print a/b}')" 10) |"
done
echo
bad=
for id in "${!SANITY[@]}"; do [[ ${SANITY[$id]} == 0 ]] || bad+=" $id (${SANITY[$id]} left)"; done
if [[ -z $bad ]]; then
    echo "After every renew measurement \`certrenewd check\` found all certificates of the tree ok."
else
    echo "**Not everything was renewed:**$bad."
fi
echo
echo "Where certrenewd's renew time goes (bench-$R, ${NRENEWED[$R]} renewals): CPU (user+sys) $(ft "${CPU[renew-$R]:-}")"
echo "of $(ft "${MED[renew-$R]}") wall (reuse), $(ft "${CPU[renew-rot-$R]:-}") of $(ft "${MED[renew-rot-$R]}") (rotate_keys)."
echo "kubeadm (${NRENEWED[kubeadm]} renewals): CPU $(ft "${CPU[renew-kubeadm]:-}") of $(ft "${MED[renew-kubeadm]}") wall (reuse); the openssl script: CPU $(ft "${CPU[ossl-kubeadm]:-}") of $(ft "${MED[ossl-kubeadm]}")."
[[ -z $STRACE_SUMMARY ]] || echo "\`strace -f -w -c\` (wall time inside each syscall, one run): $STRACE_SUMMARY"
echo
echo "## 3. certmonger"
echo
if [[ $CM_COUNT -le 0 ]]; then
    echo "Skipped (BENCH_CERTMONGER_COUNT=0)."
elif [[ -n $(cv skip) ]]; then
    echo "Skipped: $(cv skip)"
elif [[ -n $(cv error) ]]; then
    echo "Failed: $(cv error)"
else
    cm_issue=$(awk -v m="$(cv issue_ms)" 'BEGIN{print m/1000}')
    cm_renew=$(awk -v m="$(cv renew_ms)" 'BEGIN{print m/1000}')
    cm_list=$(awk -v m="$(cv list_ms)" 'BEGIN{print m/1000}')
    echo "$(cv version) (Debian package, unpacked, not installed) driven with \`getcert\` and its \`local\` CA,"
    echo "without any D-Bus bus: \`certmonger -n -L -P <tmp>/sock -c <script>\` (private socket only),"
    echo "state in a temp dir via the \`CERTMONGER_*_DIR\` variables (\`benches/certmonger-probe.sh\`). One run."
    echo
    echo "| what | certmonger ($CM_COUNT certificates) | per certificate | certrenewd, per certificate |"
    echo "| --- | ---: | ---: | ---: |"
    echo "| issue (request, RSA 2048 key, until MONITORING) | $(ft "$cm_issue") | $(per "$cm_issue" "$CM_COUNT") | n/a (certrenewd only renews) |"
    if [[ -n ${MED[check-$R]:-} ]]; then cr="$(per "${MED[check-$R]}" "${NCERT[$R]}") (check, bench-$R)"; else cr=n/a; fi
    echo "| list / check | $(ft "$cm_list") | $(per "$cm_list" "$CM_COUNT") | $cr |"
    echo "| renew (\`getcert resubmit\`, same key, until MONITORING) | $(ft "$cm_renew") | $(per "$cm_renew" "$CM_COUNT") | $(per "${MED[renew-$R]}" "${NRENEWED[$R]}") (bench-$R), $(per "${MED[renew-kubeadm]}" "${NRENEWED[kubeadm]}") (kubeadm) |"
    echo "| daemon RSS | $(( $(cv rss_after_kib) / 1024 )) MiB ($CM_COUNT tracked) | | $(( D_RSS / 1024 )) MiB (after a pass over bench-$D) |"
    echo
    echo "Renewed: $(cv renewed); issuer of the renewed certificates: \`$(cv issuer)\`: the \`local\` CA is"
    echo "certmonger's own self-signed CA, so it cannot renew certificates of the cluster's CAs in place"
    echo "(that needs a custom CA helper script), and certmonger only renews certificates it tracks."
fi
echo
echo "## 4. daemon (\`certrenewd run\`)"
echo
echo "| measure | value | target |"
echo "| --- | ---: | --- |"
for n in $ALL_SIZES; do
    echo "| start to READY=1, bench-$n (${NCERT[$n]:-$(count_certs "$(tree "bench-$n")")} certificates, \`run_on_start = false\`, median of $RUNS) | $(ft "${READY[$n]}"), VmRSS then $(awk -v k="${RSS_READY[$n]}" 'BEGIN{printf "%.1f MiB", k/1024}') | |"
done
echo "| start to end of the first pass, bench-$D (\`run_on_start = true\`, ${NRENEWED[$D]:-$(config "$(tree "bench-$D")" "$WORK/s" >"$WORK/x.toml"; count_not_ok "$WORK/x.toml")} renewals, pass $D_RESULT) | $(ft "$D_PASS") | |"
mib() { awk -v k="$1" 'BEGIN{printf "%.1f MiB", k/1024}'; }
echo "| VmRSS after the first pass (RssAnon + RssFile; VmHWM) | $(mib "$D_RSS") ($(mib "$D_ANON") + $(mib "$D_FILE"); $(mib "$D_HWM")) | < 10 MiB: $(verdict ge 10240 "$D_RSS") |"
[[ -z $D_BARE_RSS ]] || echo "| the same without the unit's \`Environment=\` | $(mib "$D_BARE_RSS") (RssAnon $(mib "$D_BARE_ANON")) | |"
echo "| CPU time (utime+stime) over ${IDLE} s idle after the pass | ${D_IDLE_CPU} ms (RSS then $(awk -v k="$D_RSS_IDLE" 'BEGIN{printf "%.1f MiB", k/1024}'), $D_THREADS threads) | ~0 (<= 10 ms, one clock tick): $(verdict ge 10 "$D_IDLE_CPU") |"
echo "| release binary (stripped) | $BIN_MIB MiB ($BIN_SIZE bytes) | |"
echo
echo "The daemon runs with the \`Environment=\` of \`systemd/certrenewd.service\` (${UNIT_ENV[*]:-none}) unless said otherwise."
echo "The daemon's config for the pass has \`units = []\`: nothing to restart, so the pass"
echo "succeeds without systemd; D-Bus addresses point to a temp path where nothing listens."
echo
echo "## 5. scaling"
echo
echo "| certificates | check | per certificate (CPU) | renewed | renew | per renewal (CPU) | READY=1 |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for n in $SIZES; do
    echo "| ${NCERT[$n]} | $(ft "${MED[check-$n]}") | $(per "${MED[check-$n]}" "${NCERT[$n]}") ($(per "${CPU[check-$n]:-}" "${NCERT[$n]}")) | ${NRENEWED[$n]} | $(ft "${MED[renew-$n]}") | $(per "${MED[renew-$n]}" "${NRENEWED[$n]}") ($(per "${CPU[renew-$n]:-}" "${NRENEWED[$n]}")) | $(ft "${READY[$n]}") |"
done
echo
prev=
lin=
for n in $SIZES; do
    if [[ -n $prev ]]; then
        ec=$(expo "${MED[check-$prev]}" "${MED[check-$n]}" "${NCERT[$prev]}" "${NCERT[$n]}")
        er=$(expo "${MED[renew-$prev]}" "${MED[renew-$n]}" "${NRENEWED[$prev]}" "${NRENEWED[$n]}")
        line="- ${NCERT[$prev]} -> ${NCERT[$n]}: check wall n^$ec, renew wall n^$er"
        if [[ -n ${CPU[check-$n]:-} ]]; then
            line+="; CPU: check n^$(expo "${CPU[check-$prev]}" "${CPU[check-$n]}" "${NCERT[$prev]}" "${NCERT[$n]}")"
            line+=", renew n^$(expo "${CPU[renew-$prev]}" "${CPU[renew-$n]}" "${NRENEWED[$prev]}" "${NRENEWED[$n]}")"
        fi
        lin+="$line"$'\n'
    fi
    prev=$n
done
echo "The bench trees have one key per 100 leaves, every tenth key RSA 2048 (the rest P-256), and"
echo "half the leaves under an RSA CA: bench-100 has no RSA leaf key, the larger trees 10 %, so"
echo "the per-certificate work of bench-100 differs a little from that of the larger trees."
echo
echo "Growth exponents between sizes (time ~ n^k; k = 1 is linear, k < 1 means a fixed per-run"
echo "cost still weighs in; wall exponents also move with the machine's load, CPU ones do not):"
echo
printf '%s' "$lin"
} >"$WORK/results.md"

cat "$WORK/results.md"
mkdir -p "$(dirname "$OUT")"
cp "$WORK/results.md" "$OUT"
say "written to $OUT"

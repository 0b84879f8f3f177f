#!/usr/bin/env bash
# A real systemd user manager, D-Bus, journald and (optionally) a 3-member etcd cluster with
# mutual TLS, private to one mount namespace, for end-to-end tests of certrenewd.
#
# Usage:
#   sandbox.sh start DIR            start journald + `systemd --user` in a new mount namespace;
#                                   writes DIR/env and DIR/pids; returns 0 when the bus answers
#   sandbox.sh exec DIR -- CMD...   run CMD inside that namespace with DIR/env exported
#   sandbox.sh unit DIR NAME FILE   install a user unit (FILE "-" = stdin) and daemon-reload
#   sandbox.sh etcd DIR PKIDIR      run etcd-1..3.service (mutual TLS) and wait until healthy
#   sandbox.sh etcdctl DIR PKIDIR ARGS...  etcdctl against that cluster with the client cert
#   sandbox.sh stop DIR             stop everything started for DIR, by PID; nothing stays
#
# The sandbox belongs to the process that started it (SANDBOX_OWNER_PID, default: the parent
# of `sandbox.sh start`, e.g. the test binary or script): should the owner exit without
# `stop` (a test run killed on a timeout), a watcher outside the namespace stops it within a
# second. SANDBOX_OWNER_PID=0 disables that (a sandbox meant to outlive its starter).
#
# Exit status: that of the command; 77 from `start` when this machine cannot host a sandbox
# (not root, or no mount namespace), so callers can skip instead of failing.
#
# What `start` does:
#   - `unshare -m --propagation private` runs a holder process whose mount namespace is the
#     sandbox; it lives until `stop`.
#   - The holder first moves itself into a fresh cgroup v2 child, <its cgroup>/certrenewd-sandbox-PID,
#     then enters a new cgroup namespace and mounts cgroup2 over /sys/fs/cgroup. So the user
#     manager sees that child as its root and only ever touches processes we started. (Run
#     at the root of the host's cgroup tree, `systemd --user` moves every process of the
#     machine into /init.scope.) `stop` kills whatever is left in that cgroup and removes it.
#   - tmpfs on /run/systemd (with system/ and journal/), tmpfs on /run/log with DIR/journal
#     bound on /run/log/journal, tmpfs on /var/log/journal and /run/dbus (the latter with
#     system_bus_socket -> DIR/runtime/bus, so the "system bus" inside is the sandbox's).
#   - /lib/systemd/systemd-journald, then /lib/systemd/systemd --user with a clean
#     environment (HOME and XDG_* under DIR); its own dbus.socket owns DIR/runtime/bus.
#
# DIR layout: runtime/ (XDG_RUNTIME_DIR, 0700; bus socket) config/ (XDG_CONFIG_HOME; units in
# config/systemd/user) journal/ (journald's files; journalctl -D DIR/journal) home/ data/
# state/ cache/ etcd/ (member data) env pids (holder, watcher, journald, systemd: PID and
# start time) cgroup (our cgroup v2 path) sandbox.log journald.log systemd.log (the manager
# itself logs to the sandbox journal).
#
# etcd: PKI file names, relative to PKIDIR unless absolute; "{N}" is replaced by the member
# number 1..3, so per-member certificates work as well as one certificate with all SANs:
#   SANDBOX_ETCD_CA           (ca.crt)            CA trusted for clients and peers
#   SANDBOX_ETCD_SERVER_CERT  (etcd-server.crt)   --cert-file; needs SAN IP 127.0.0.1
#   SANDBOX_ETCD_SERVER_KEY   (etcd-server.key)   --key-file
#   SANDBOX_ETCD_PEER_CERT    (= server cert)     --peer-cert-file; serverAuth+clientAuth, IP 127.0.0.1
#   SANDBOX_ETCD_PEER_KEY     (= server key)      --peer-key-file
#   SANDBOX_ETCD_PEER_CA      (= CA)              --peer-trusted-ca-file
#   SANDBOX_ETCD_CLIENT_CERT  (etcd-client.crt)   etcdctl's client certificate (clientAuth)
#   SANDBOX_ETCD_CLIENT_KEY   (etcd-client.key)
#   SANDBOX_ETCD_PORT_BASE    (20000)             member N listens on BASE+N*100+79 (client)
#                                                 and BASE+N*100+80 (peer): 20179/20180, ...
#   SANDBOX_ETCD_TIMEOUT      (30)                seconds to wait for a healthy cluster
# The defaults are the StarlingX names (/etc/etcd/{ca,etcd-server,etcd-client}.{crt,key}).
set -euo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
readonly SELF
SKIP=77

die() {
  echo "sandbox: $*" >&2
  exit 1
}
log() { echo "sandbox: $*" >&2; }

# Absolute path of DIR; created when missing if $2 is "create".
abs_dir() {
  [ -n "${1:-}" ] || die "missing DIR"
  [ "${2:-}" != create ] || mkdir -p -- "$1"
  [ -d "$1" ] || die "no sandbox directory $1"
  (cd -- "$1" && pwd -P)
}

# Value of KEY in DIR/pids, empty when absent.
pid_of() {
  local dir=$1 key=$2
  [ -f "$dir/pids" ] || return 0
  sed -n "s/^$key=//p" "$dir/pids" | head -n1
}

# Start time (clock ticks since boot) of PID, empty when it does not exist or is a zombie
# (an exited holder is reparented to PID 1, which may take a while to reap it).
start_time() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  stat=${stat##*) }
  # Fields 3 (state) and 22 (starttime) overall are 1 and 20 after "pid (comm) ".
  awk '$1 != "Z" {print $20}' <<<"$stat"
}

# The holder PID of DIR if it is still the very process we started, else empty.
live_holder() {
  local dir=$1 pid st
  pid=$(pid_of "$dir" holder)
  [ -n "$pid" ] || return 0
  st=$(pid_of "$dir" holder_start)
  [ -n "$st" ] && [ "$(start_time "$pid")" = "$st" ] && echo "$pid"
  return 0
}

need_holder() {
  local h
  h=$(live_holder "$1")
  [ -n "$h" ] || die "no running sandbox in $1 (run: sandbox.sh start $1)"
  echo "$h"
}

# Run "$@" in the sandbox of $dir with its environment.
in_sandbox() {
  local dir=$1 h
  shift
  h=$(need_holder "$dir")
  set -a
  # shellcheck disable=SC1091
  . "$dir/env"
  set +a
  exec nsenter --mount="/proc/$h/ns/mnt" --wd="$PWD" -- "$@"
}

# Same as in_sandbox, but returns instead of replacing this shell.
run_in() {
  (in_sandbox "$@")
}

cmd_start() {
  local dir
  [ "$(id -u)" = 0 ] || {
    echo "sandbox: skipped: needs root (mount namespaces, cgroups)" >&2
    exit $SKIP
  }
  for tool in unshare nsenter mount /lib/systemd/systemd /lib/systemd/systemd-journald busctl systemctl journalctl; do
    command -v "$tool" >/dev/null || {
      echo "sandbox: skipped: $tool not found" >&2
      exit $SKIP
    }
  done
  unshare -m --propagation private -- mount -t tmpfs tmpfs /mnt 2>/dev/null || {
    echo "sandbox: skipped: cannot create a mount namespace here (unshare -m failed)" >&2
    exit $SKIP
  }
  dir=$(abs_dir "${1:-}" create)
  [ -z "$(live_holder "$dir")" ] || die "a sandbox is already running in $dir"
  mkdir -p "$dir"/{runtime,config/systemd/user,journal,home,data,state,cache,etcd,.cgroot}
  chmod 0700 "$dir/runtime"
  rm -f "$dir/ready" "$dir/failed" "$dir/pids" "$dir/cgroup"
  {
    printf 'export XDG_RUNTIME_DIR=%q\n' "$dir/runtime"
    printf 'export XDG_CONFIG_HOME=%q\n' "$dir/config"
    printf 'export DBUS_SESSION_BUS_ADDRESS=%q\n' "unix:path=$dir/runtime/bus"
    printf 'export DBUS_SYSTEM_BUS_ADDRESS=%q\n' "unix:path=$dir/runtime/bus"
    printf 'export SANDBOX_JOURNAL_DIR=%q\n' "$dir/journal"
    printf 'export SANDBOX_DIR=%q\n' "$dir"
    printf 'export SYSTEMD_PAGER=\n'
  } >"$dir/env"

  local deadline=$((SECONDS + ${SANDBOX_START_TIMEOUT:-20}))
  # The holder must not keep the caller's stdout/stderr open (callers wait for EOF).
  unshare -m --propagation private -- bash "$SELF" __holder "$dir" \
    </dev/null >>"$dir/sandbox.log" 2>&1 &
  local h=$!
  printf 'holder=%s\nholder_start=%s\n' "$h" "$(start_time "$h")" >"$dir/pids"
  # Whoever started the sandbox (default: our parent, e.g. the test process) owns it: if the
  # owner exits without `stop` (a killed test run), a watcher outside the namespace stops it.
  local owner=${SANDBOX_OWNER_PID-$PPID}
  if [ -n "$owner" ] && [ "$owner" != 0 ]; then
    bash "$SELF" __watch "$dir" "$owner" "$(start_time "$owner")" \
      </dev/null >>"$dir/sandbox.log" 2>&1 &
    printf 'watcher=%s\nwatcher_start=%s\n' "$!" "$(start_time "$!")" >>"$dir/pids"
  fi

  while [ ! -e "$dir/ready" ]; do
    if [ -e "$dir/failed" ] || ! kill -0 "$h" 2>/dev/null; then
      start_failed "$dir" "the namespace holder failed"
    fi
    [ $SECONDS -lt $deadline ] || start_failed "$dir" "journald/systemd --user not up within ${SANDBOX_START_TIMEOUT:-20}s"
    sleep 0.05
  done
  # The bus answers when org.freedesktop.systemd1 does (this also activates dbus.service).
  until run_in "$dir" busctl --user --timeout=2 get-property org.freedesktop.systemd1 \
    /org/freedesktop/systemd1 org.freedesktop.systemd1.Manager Version >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || start_failed "$dir" "org.freedesktop.systemd1 does not answer on $dir/runtime/bus"
    sleep 0.1
  done
  local state
  until state=$(run_in "$dir" systemctl --user is-system-running 2>/dev/null) ||
    [ "$state" = degraded ]; do
    [ $SECONDS -lt $deadline ] || start_failed "$dir" "user manager still '$state'"
    sleep 0.1
  done
  [ "$state" = running ] || log "user manager is $state: $(run_in "$dir" systemctl --user --failed --plain --no-legend 2>&1 | tr '\n' ' ')"
  cat "$dir/pids.holder" >>"$dir/pids"
  rm -f "$dir/pids.holder"
  return 0
}

start_failed() {
  local dir=$1
  echo "sandbox: start failed: $2" >&2
  for f in sandbox.log journald.log systemd.log; do
    [ -s "$dir/$f" ] && { echo "--- $dir/$f (last 20 lines)" >&2; tail -n 20 "$dir/$f" >&2; }
  done
  cmd_stop "$dir" || true
  exit 1
}

# Stage 1 inside the new mount namespace: own cgroup, then a cgroup namespace rooted there.
holder() {
  local dir=$1 rel cg
  trap 'touch "$dir/failed"' ERR
  mount -t cgroup2 cgroup2 "$dir/.cgroot"
  rel=$(sed -n 's/^0:://p' /proc/self/cgroup)
  cg="${rel%/}/certrenewd-sandbox-$$"
  mkdir "$dir/.cgroot$cg"
  echo "$cg" >"$dir/cgroup"
  echo $$ >"$dir/.cgroot$cg/cgroup.procs"
  umount "$dir/.cgroot"
  exec unshare -C -- bash "$SELF" __holder2 "$dir"
}

# Stage 2: mounts, journald, systemd --user; then wait for TERM and stop them.
holder2() {
  local dir=$1 jd sd
  trap 'touch "$dir/failed"' ERR
  mount -t cgroup2 cgroup2 /sys/fs/cgroup
  mount -t tmpfs -o mode=0755 tmpfs /run/systemd
  mkdir -p /run/systemd/system /run/systemd/journal
  mount -t tmpfs -o mode=0755 tmpfs /run/log
  mkdir -p /run/log/journal
  mount --bind "$dir/journal" /run/log/journal
  # Never let this journald write into the machine's persistent journal.
  if [ -d /var/log/journal ]; then mount -t tmpfs tmpfs /var/log/journal; fi
  if [ -d /run/dbus ]; then
    mount -t tmpfs -o mode=0755 tmpfs /run/dbus
    ln -s "$dir/runtime/bus" /run/dbus/system_bus_socket
  fi

  local -a base_env=(PATH="$PATH" LANG=C.UTF-8 USER=root LOGNAME=root SHELL=/bin/sh HOME="$dir/home")
  env -i "${base_env[@]}" SYSTEMD_LOG_TARGET=console \
    /lib/systemd/systemd-journald </dev/null >>"$dir/journald.log" 2>&1 &
  jd=$!
  for _ in $(seq 100); do [ -S /run/systemd/journal/socket ] && break; sleep 0.05; done
  [ -S /run/systemd/journal/socket ] || { echo "journald did not create its socket" >&2; touch "$dir/failed"; exit 1; }

  env -i "${base_env[@]}" XDG_RUNTIME_DIR="$dir/runtime" XDG_CONFIG_HOME="$dir/config" \
    XDG_DATA_HOME="$dir/data" XDG_STATE_HOME="$dir/state" XDG_CACHE_HOME="$dir/cache" \
    SYSTEMD_LOG_TARGET=journal /lib/systemd/systemd --user </dev/null >>"$dir/systemd.log" 2>&1 &
  sd=$!
  printf 'journald=%s\nsystemd=%s\n' "$jd" "$sd" >"$dir/pids.holder"
  for _ in $(seq 200); do [ -S "$dir/runtime/bus" ] && break; sleep 0.05; done
  [ -S "$dir/runtime/bus" ] || { echo "systemd --user did not create $dir/runtime/bus" >&2; touch "$dir/failed"; exit 1; }

  trap 'stopping=1' TERM INT
  trap - ERR
  stopping=0
  touch "$dir/ready"
  local nap
  while [ $stopping = 0 ] && kill -0 "$sd" 2>/dev/null; do
    sleep 1 &
    nap=$!
    wait $nap || true
  done
  kill "$nap" 2>/dev/null || true
  wait "$nap" 2>/dev/null || true
  [ $stopping = 1 ] || echo "systemd --user exited on its own" >&2
  # SIGTERM makes a user manager start exit.target: every unit is stopped, then it exits.
  stop_child "$sd" 15
  stop_child "$jd" 5
  exit 0
}

# TERM the child PID, wait up to SECS for it, then KILL it.
stop_child() {
  local pid=$1 secs=$2 i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < secs * 20; i++)); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    sleep 0.05
  done
  echo "pid $pid did not stop within ${secs}s: killing it" >&2
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# Stops the sandbox of $1 once its owner (pid $2, started at $3) is gone; exits after a stop.
watch() {
  local dir=$1 owner=$2 owner_start=$3 nap=""
  trap '[ -z "$nap" ] || { kill "$nap" 2>/dev/null; wait "$nap" 2>/dev/null; }; exit 0' TERM
  while [ -e "$dir/pids" ]; do
    if [ -z "$owner_start" ] || [ "$(start_time "$owner")" != "$owner_start" ]; then
      log "owner $owner exited without stopping the sandbox in $dir: stopping it"
      cmd_stop "$dir"
      exit 0
    fi
    sleep 0.5 &
    nap=$!
    wait $nap || true
    nap=""
  done
}

cmd_stop() {
  local dir h cg i w
  [ -n "${1:-}" ] || die "usage: sandbox.sh stop DIR"
  [ -d "$1" ] || return 0
  dir=$(abs_dir "$1")
  w=$(pid_of "$dir" watcher)
  if [ -n "$w" ] && [ "$w" != "$BASHPID" ] && [ "$(start_time "$w")" = "$(pid_of "$dir" watcher_start)" ]; then
    kill -TERM "$w" 2>/dev/null || true
  fi
  h=$(live_holder "$dir")
  if [ -n "$h" ]; then
    # A stopping etcd leader tries for ~7 s to hand over leadership to peers that are
    # stopping too; test data need no graceful stop.
    if [ -e "$dir/config/systemd/user/etcd-1.service" ]; then
      run_in "$dir" systemctl --user kill --signal=SIGKILL etcd-1.service etcd-2.service \
        etcd-3.service >/dev/null 2>&1 || true
    fi
    kill -TERM "$h" 2>/dev/null || true
    for ((i = 0; i < 400; i++)); do
      [ -n "$(live_holder "$dir")" ] || break
      sleep 0.05
    done
  fi
  cg=$([ -f "$dir/cgroup" ] && cat "$dir/cgroup" || true)
  if [ -n "$cg" ]; then
    # Whatever is still in our cgroup was started by this sandbox: kill it by PID, then
    # remove the cgroups. cgroup2 is mounted in a throwaway namespace, never on the host.
    unshare -m --propagation private -- bash "$SELF" __sweep "$dir" "$cg" || true
  elif [ -n "$h" ]; then
    kill -KILL "$h" 2>/dev/null || true
  fi
  rm -f "$dir/ready" "$dir/failed" "$dir/pids" "$dir/pids.holder" "$dir/cgroup"
  return 0
}

sweep() {
  local dir=$1 cg=$2 root i pids left
  root="$dir/.cgroot"
  mkdir -p "$root"
  mount -t cgroup2 cgroup2 "$root"
  if [ -d "$root$cg" ]; then
    for ((i = 0; i < 100; i++)); do
      pids=$(find "$root$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
      [ -n "$pids" ] || break
      [ $i -gt 0 ] || log "killing leftover processes: $(tr '\n' ' ' <<<"$pids")"
      for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
      sleep 0.05
    done
    find "$root$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
    left=$(find "$root$cg" -depth -type d 2>/dev/null || true)
    [ -z "$left" ] || log "could not remove cgroups: $left"
  fi
  umount "$root"
  rmdir "$root" 2>/dev/null || true
}

cmd_exec() {
  local dir
  dir=$(abs_dir "${1:-}")
  shift
  [ "${1:-}" = -- ] && shift
  [ $# -gt 0 ] || die "usage: sandbox.sh exec DIR -- CMD..."
  in_sandbox "$dir" "$@"
}

cmd_unit() {
  local dir name file
  dir=$(abs_dir "${1:-}")
  name=${2:-}
  file=${3:-}
  [ -n "$name" ] && [ -n "$file" ] || die "usage: sandbox.sh unit DIR NAME FILE"
  [[ $name != */* ]] || die "unit name must not contain /: $name"
  need_holder "$dir" >/dev/null
  if [ "$file" = - ]; then
    cat >"$dir/config/systemd/user/$name"
  else
    cp -- "$file" "$dir/config/systemd/user/$name"
  fi
  run_in "$dir" systemctl --user daemon-reload
}

# Path of PKI file $2 (may hold {N}) for member $3, relative to PKIDIR $1 unless absolute.
pki_file() {
  local f=${2//\{N\}/$3}
  [[ $f = /* ]] || f="$1/$f"
  echo "$f"
}

etcd_endpoints() {
  local base=${SANDBOX_ETCD_PORT_BASE:-20000} n out=""
  for n in 1 2 3; do out+="${out:+,}https://127.0.0.1:$((base + n * 100 + 79))"; done
  echo "$out"
}

etcd_ctl() {
  local dir=$1 pki=$2
  shift 2
  run_in "$dir" env ETCDCTL_API=3 etcdctl --endpoints "$(etcd_endpoints)" \
    --cacert "$(pki_file "$pki" "${SANDBOX_ETCD_CA:-ca.crt}" 1)" \
    --cert "$(pki_file "$pki" "${SANDBOX_ETCD_CLIENT_CERT:-etcd-client.crt}" 1)" \
    --key "$(pki_file "$pki" "${SANDBOX_ETCD_CLIENT_KEY:-etcd-client.key}" 1)" \
    --dial-timeout=2s --command-timeout=5s "$@"
}

cmd_etcd() {
  local dir pki base n cluster="" f
  dir=$(abs_dir "${1:-}")
  [ -n "${2:-}" ] || die "usage: sandbox.sh etcd DIR PKIDIR"
  pki=$(cd -- "$2" && pwd -P) || die "no PKI directory $2"
  need_holder "$dir" >/dev/null
  base=${SANDBOX_ETCD_PORT_BASE:-20000}
  for n in 1 2 3; do cluster+="${cluster:+,}etcd-$n=https://127.0.0.1:$((base + n * 100 + 80))"; done
  for n in 1 2 3; do
    local ca server_cert server_key peer_cert peer_key peer_ca client=$((base + n * 100 + 79)) peer=$((base + n * 100 + 80))
    ca=$(pki_file "$pki" "${SANDBOX_ETCD_CA:-ca.crt}" $n)
    server_cert=$(pki_file "$pki" "${SANDBOX_ETCD_SERVER_CERT:-etcd-server.crt}" $n)
    server_key=$(pki_file "$pki" "${SANDBOX_ETCD_SERVER_KEY:-etcd-server.key}" $n)
    peer_cert=$(pki_file "$pki" "${SANDBOX_ETCD_PEER_CERT:-${SANDBOX_ETCD_SERVER_CERT:-etcd-server.crt}}" $n)
    peer_key=$(pki_file "$pki" "${SANDBOX_ETCD_PEER_KEY:-${SANDBOX_ETCD_SERVER_KEY:-etcd-server.key}}" $n)
    peer_ca=$(pki_file "$pki" "${SANDBOX_ETCD_PEER_CA:-${SANDBOX_ETCD_CA:-ca.crt}}" $n)
    for f in "$ca" "$server_cert" "$server_key" "$peer_cert" "$peer_key" "$peer_ca"; do
      [ -r "$f" ] || die "etcd-$n: missing $f (see the SANDBOX_ETCD_* variables in $SELF)"
    done
    mkdir -p "$dir/etcd/etcd-$n"
    chmod 0700 "$dir/etcd/etcd-$n"
    cat >"$dir/config/systemd/user/etcd-$n.service" <<EOF
[Unit]
Description=etcd member etcd-$n (certrenewd sandbox)

[Service]
Type=notify
ExecStart=/usr/bin/etcd --name etcd-$n --data-dir $dir/etcd/etcd-$n \\
  --listen-client-urls https://127.0.0.1:$client --advertise-client-urls https://127.0.0.1:$client \\
  --listen-peer-urls https://127.0.0.1:$peer --initial-advertise-peer-urls https://127.0.0.1:$peer \\
  --initial-cluster $cluster --initial-cluster-state new --initial-cluster-token certrenewd-sandbox \\
  --client-cert-auth --trusted-ca-file $ca --cert-file $server_cert --key-file $server_key \\
  --peer-client-cert-auth --peer-trusted-ca-file $peer_ca --peer-cert-file $peer_cert --peer-key-file $peer_key
Restart=on-failure
RestartSec=1
TimeoutStartSec=60
EOF
  done
  run_in "$dir" systemctl --user daemon-reload
  # Type=notify members are only ready once a quorum exists: start all three together.
  run_in "$dir" systemctl --user start --no-block etcd-1.service etcd-2.service etcd-3.service
  local deadline=$((SECONDS + ${SANDBOX_ETCD_TIMEOUT:-30})) out
  until out=$(etcd_ctl "$dir" "$pki" endpoint health --cluster 2>&1); do
    if [ $SECONDS -ge $deadline ]; then
      echo "$out" >&2
      run_in "$dir" systemctl --user status --no-pager --lines=15 etcd-1.service etcd-2.service etcd-3.service >&2 || true
      die "etcd cluster not healthy within ${SANDBOX_ETCD_TIMEOUT:-30}s"
    fi
    sleep 0.2
  done
  echo "$out"
}

cmd_etcdctl() {
  local dir pki
  dir=$(abs_dir "${1:-}")
  [ -n "${2:-}" ] || die "usage: sandbox.sh etcdctl DIR PKIDIR ARGS..."
  pki=$(cd -- "$2" && pwd -P) || die "no PKI directory $2"
  shift 2
  etcd_ctl "$dir" "$pki" "$@"
}

usage() {
  sed -n '2,/^set -euo/p' "$SELF" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

main() {
  local cmd=${1:-}
  [ $# -gt 0 ] && shift
  case $cmd in
  start) cmd_start "$@" ;;
  exec) cmd_exec "$@" ;;
  unit) cmd_unit "$@" ;;
  etcd) cmd_etcd "$@" ;;
  etcdctl) cmd_etcdctl "$@" ;;
  stop) cmd_stop "$@" ;;
  __holder) holder "$@" ;;
  __holder2) holder2 "$@" ;;
  __sweep) sweep "$@" ;;
  __watch) watch "$@" ;;
  *) usage ;;
  esac
}

main "$@"

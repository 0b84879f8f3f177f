#!/usr/bin/env bash
# The main job, end to end, on a throwaway controller: a StarlingX-shaped PKI (made by the
# real openssl CLI) whose certificates expire in 10 days, a "hard way" tree whose CA key is
# not on the node, a real systemd user manager, D-Bus and journald in a private mount
# namespace with stand-in etcd/kube-apiserver units — then one real renewal pass.
# Nothing outside a temp directory is touched; everything started is stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
# The packages and the build need the network; the demo itself runs in a network namespace of
# its own with only loopback up. certrenewd dials the addresses it reads (manifest flags,
# kubeconfig servers, etcd URLs): one that is not loopback then fails at once as unreachable,
# instead of reaching another host.
if [[ ${CERTRENEWD_DEMO_NETNS:-} != entered ]]; then
    bash .ci/deps.sh
    cargo build --release --quiet
    exec unshare --net env CERTRENEWD_DEMO_NETNS=entered bash "$0" "$@"
fi
ip link set lo up
BIN=$PWD/target/release/certrenewd
SANDBOX=$PWD/tests/sandbox/sandbox.sh
WORK=$(mktemp -d /tmp/certrenewd-demo.XXXXXX)
export SANDBOX_OWNER_PID=$$
cleanup() { "$SANDBOX" stop "$WORK/sb" >/dev/null 2>&1 || true; }
trap cleanup EXIT
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "A throwaway controller PKI in $WORK (openssl and cfssl)"
tests/fixtures/mkpki.sh starlingx "$WORK/starlingx" >/dev/null
tests/fixtures/mkpki.sh hardway "$WORK/hardway" >/dev/null
S=$WORK/starlingx
cat > "$WORK/certrenewd.toml" <<TOML
bus = "user"                 # the sandbox's own systemd manager
state_dir = "$WORK/state"
validity_days = 365          # the demo certificates were issued for only 10 days
restart_timeout_secs = 20

# One throwaway node with a stand-in etcd: no other controller to take turns with (under
# the default "auto", a node that runs etcd but has neither its settings nor a client
# certificate where controllers keep them holds its restarts).
[coordination]
enabled = false

[[watch]]
path = "$S/etc/etcd"
units = ["etcd.service"]

[[watch]]
path = "$S/etc/kubernetes/pki"
units = ["kube-apiserver.service"]

[[watch]]
path = "$WORK/hardway/etc/etcd"
units = ["etcd.service"]
TOML
cat "$WORK/certrenewd.toml"

say "A real systemd user manager, D-Bus and journald in a private mount namespace"
"$SANDBOX" start "$WORK/sb"
for u in etcd kube-apiserver; do
    printf '[Service]\nExecStart=/bin/sleep infinity\n' | "$SANDBOX" unit "$WORK/sb" "$u.service" -
    "$SANDBOX" exec "$WORK/sb" -- systemctl --user start "$u.service"
done
in_sb() { "$SANDBOX" exec "$WORK/sb" -- "$@"; }
pids() { in_sb systemctl --user show -p MainPID --value etcd.service kube-apiserver.service | tr '\n' ' '; }
echo "etcd.service and kube-apiserver.service running, MainPIDs: $(pids)"

say "certrenewd check"
"$BIN" --config "$WORK/certrenewd.toml" check

say "certrenewd renew --dry-run"
rc=0
"$BIN" --config "$WORK/certrenewd.toml" renew --dry-run || rc=$?
echo "exit status $rc (a dry run exits as the pass would: 1, the hard-way certificates cannot be renewed here)"

say "certrenewd renew (a real pass: reissue, back up, install, restart over D-Bus, alarms)"
rc=0
in_sb "$BIN" --config "$WORK/certrenewd.toml" renew || rc=$?
echo "exit status $rc (1: the hard-way certificates cannot be renewed here, see the alarms)"
echo "MainPIDs now: $(pids)"

say "openssl verify of the renewed certificates"
openssl verify -CAfile "$S/etc/etcd/ca.crt" "$S/etc/etcd/etcd-server.crt" "$S/etc/kubernetes/pki/apiserver-etcd-client.crt"
openssl x509 -in "$S/etc/etcd/etcd-server.crt" -noout -subject -issuer -enddate

say "certrenewd check (after)"
"$BIN" --config "$WORK/certrenewd.toml" check

say "certrenewd alarms"
"$BIN" --config "$WORK/certrenewd.toml" alarms

say "journalctl ALARM_ID=250.003 (the sandbox's journal)"
in_sb journalctl -D "$WORK/sb/journal" --no-pager -o verbose ALARM_ID=250.003 | grep -E "^\s+(MESSAGE|ALARM_[A-Z]+|PRIORITY)=" || true

say "backups"
find "$WORK/state/backup" -type f | sed "s|$WORK/||"
echo
echo "demo done; files are in $WORK (the sandbox is stopped on exit)"

#!/usr/bin/env bash
# Smoke test of the etcd part of the sandbox: a 3-member etcd cluster with mutual TLS as
# user units in the sandbox, once with an openssl-made StarlingX PKI and once with a
# cfssl-made kubeadm PKI (tests/fixtures/mkpki.sh), checking `endpoint health --cluster`,
# a put/get with a client certificate, that a client without a certificate is refused,
# and a rolling restart of the members; then everything is stopped. Prints timings.
#
#   tests/sandbox/etcd-smoke.sh [starlingx|kubeadm]...   (default: both)
#
# Exit status: 0 passed, 1 failed, 77 skipped (not root / no mount namespaces / no etcd).
set -euo pipefail

HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
SANDBOX=$HERE/sandbox.sh
MKPKI=$HERE/../fixtures/mkpki.sh
layouts=("$@")
[ ${#layouts[@]} -gt 0 ] || layouts=(starlingx kubeadm)

for tool in etcd etcdctl openssl; do
  command -v $tool >/dev/null || { echo "SKIP etcd-smoke: $tool not installed"; exit 77; }
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/etcd-smoke.XXXXXX")
SB=$WORK/sandbox
cleanup() {
  local rc=$?
  bash "$SANDBOX" stop "$SB" || true
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2fs", b - a }'; }
fail() {
  echo "FAIL etcd-smoke: $*" >&2
  exit 1
}

# The PKI directory and SANDBOX_ETCD_* names for one fixture layout.
pki_for() {
  local layout=$1 out=$WORK/pki-$1
  if [ -x "$MKPKI" ]; then
    bash "$MKPKI" "$layout" "$out" >/dev/null
  else
    fail "$MKPKI not found"
  fi
  case $layout in
  starlingx)
    # openssl, UTF8String names, PKCS#8 keys; etcd-client.crt is expired in this
    # fixture, so the client is the kube-apiserver's etcd client certificate.
    PKI=$out/etc/etcd
    VARS=(SANDBOX_ETCD_CLIENT_CERT=$out/etc/kubernetes/pki/apiserver-etcd-client.crt
      SANDBOX_ETCD_CLIENT_KEY=$out/etc/kubernetes/pki/apiserver-etcd-client.key)
    ;;
  kubeadm)
    # cfssl, PrintableString names, PKCS#1 keys; separate server and peer certificates.
    PKI=$out/etc/kubernetes/pki/etcd
    VARS=(SANDBOX_ETCD_SERVER_CERT=server.crt SANDBOX_ETCD_SERVER_KEY=server.key
      SANDBOX_ETCD_PEER_CERT=peer.crt SANDBOX_ETCD_PEER_KEY=peer.key
      SANDBOX_ETCD_CLIENT_CERT=healthcheck-client.crt SANDBOX_ETCD_CLIENT_KEY=healthcheck-client.key)
    ;;
  *) fail "unknown layout $layout" ;;
  esac
}

T0=$(now)
for layout in "${layouts[@]}"; do
  t=$(now)
  pki_for "$layout"
  echo "[$layout] PKI made in $(since "$t")"

  t=$(now)
  rc=0
  bash "$SANDBOX" start "$SB" || rc=$?
  [ $rc -ne 77 ] || { echo "SKIP etcd-smoke: sandbox unavailable here"; exit 77; }
  [ $rc -eq 0 ] || fail "sandbox did not start"
  echo "[$layout] sandbox up in $(since "$t")"

  t=$(now)
  env "${VARS[@]}" bash "$SANDBOX" etcd "$SB" "$PKI" || fail "[$layout] cluster not healthy"
  echo "[$layout] 3 members healthy in $(since "$t")"

  ctl() { env "${VARS[@]}" bash "$SANDBOX" etcdctl "$SB" "$PKI" "$@"; }
  t=$(now)
  health=$(ctl endpoint health --cluster 2>&1) || fail "[$layout] endpoint health: $health"
  [ "$(grep -c 'is healthy' <<<"$health")" = 3 ] || fail "[$layout] not 3 healthy: $health"
  ctl put /certrenewd/smoke "$layout" >/dev/null || fail "[$layout] put failed"
  got=$(ctl get --print-value-only /certrenewd/smoke) || fail "[$layout] get failed"
  [ "$got" = "$layout" ] || fail "[$layout] get returned '$got'"
  members=$(ctl member list | wc -l)
  [ "$members" = 3 ] || fail "[$layout] $members members"
  echo "[$layout] health, put/get, member list in $(since "$t")"

  # --client-cert-auth: a client without a certificate is refused.
  t=$(now)
  if bash "$SANDBOX" exec "$SB" -- env ETCDCTL_API=3 etcdctl --endpoints https://127.0.0.1:20179 \
    --cacert "$PKI/ca.crt" --dial-timeout=1s --command-timeout=1s get /certrenewd/smoke >/dev/null 2>&1; then
    fail "[$layout] a client without a certificate was let in"
  fi
  echo "[$layout] client without a certificate refused in $(since "$t")"

  # A rolling restart (what certrenewd does after renewing): one member at a time.
  t=$(now)
  for n in 1 2 3; do
    bash "$SANDBOX" exec "$SB" -- systemctl --user restart etcd-$n.service ||
      fail "[$layout] restart of etcd-$n failed"
  done
  health=$(ctl endpoint health --cluster 2>&1) || fail "[$layout] after restarts: $health"
  got=$(ctl get --print-value-only /certrenewd/smoke) || fail "[$layout] get after restarts failed"
  [ "$got" = "$layout" ] || fail "[$layout] get after restarts returned '$got'"
  echo "[$layout] rolling restart of 3 members in $(since "$t")"

  t=$(now)
  bash "$SANDBOX" stop "$SB"
  for n in 1 2 3; do
    if bash -c "exec 3<>/dev/tcp/127.0.0.1/$((20000 + n * 100 + 79))" 2>/dev/null; then
      fail "[$layout] port $((20000 + n * 100 + 79)) still open after stop"
    fi
  done
  echo "[$layout] stopped in $(since "$t")"
  rm -rf "$SB"
done
echo "PASS etcd-smoke (${layouts[*]}) in $(since "$T0")"

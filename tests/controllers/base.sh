#!/usr/bin/env bash
# The Debian root the booted-controller tests start from (tests/controllers/common/controllers.rs),
# built once by debootstrap and reused by every test and every test binary after that.
#
# Usage: base.sh            prints the path of a complete base root, building it first if need be
#        base.sh --bare     the same for a bare root: bookworm minbase and nothing else, the
#                           fresh Debian that .ci/bare-build proves the build's packages on
#
# The root is /var/tmp/certrenewd-ctl-<VERSION>: bookworm, minbase, with systemd as PID 1,
# D-Bus, openssl, Debian's etcd (its etcd.service disabled: a test that runs it configures it
# through /etc/default/etcd and starts it) and procps. It is built under a lock (flock on
# <root>.lock), so parallel test binaries wait for one build instead of racing; it is built
# in <root>.build and renamed into place only once complete (a .complete marker inside), so a
# half-built root is never used: an interrupted build is removed and started over. Change
# VERSION whenever the root's contents change. About a minute and 300 MB, once per machine.
#
# Exit status: 0 and the path on stdout; 77 when this machine cannot build one (not root, no
# debootstrap), so callers can skip (outside CI) with the reason from stderr; 1 on failure.
set -euo pipefail

VERSION=bookworm-v2
SUITE=bookworm
MIRROR=${CERTRENEWD_CTL_MIRROR:-http://deb.debian.org/debian}
PACKAGES=systemd,systemd-sysv,dbus,openssl,etcd-server,etcd-client,procps
ROOT=${CERTRENEWD_CTL_BASE_DIR:-/var/tmp}/certrenewd-ctl-$VERSION
BARE=false
if [[ ${1:-} == --bare ]]; then
    BARE=true
    ROOT=${CERTRENEWD_CTL_BASE_DIR:-/var/tmp}/certrenewd-bare-bookworm-v1
fi
SKIP=77

unavailable() { echo "controllers unavailable: $*" >&2; exit $SKIP; }
[[ $(id -u) -eq 0 ]] || unavailable "not root (debootstrap and systemd-nspawn need root)"
need() { command -v "$1" >/dev/null || unavailable "$1 not found (bash .ci/deps.sh installs it)"; }
$BARE || for tool in systemd-nspawn nsenter flock ip; do need "$tool"; done

if [[ -e $ROOT/.complete ]]; then echo "$ROOT"; exit 0; fi
need debootstrap

exec 9>"$ROOT.lock"
flock 9
# Another process may have finished it while this one waited for the lock.
if [[ -e $ROOT/.complete ]]; then echo "$ROOT"; exit 0; fi

build=$ROOT.build
rm -rf "$build" "$ROOT"
t0=$SECONDS
include=(--include="$PACKAGES")
$BARE && include=()
if ! debootstrap --variant=minbase "${include[@]}" "$SUITE" "$build" "$MIRROR" \
        >"$ROOT.log" 2>&1; then
    tail -n 20 "$ROOT.log" >&2
    echo "debootstrap $SUITE $build failed (full log: $ROOT.log)" >&2
    rm -rf "$build"
    exit 1
fi
if ! $BARE; then
    # A minbase root has no /etc/hosts, and etcd then fails: lookup localhost ... no such host.
    printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$build/etc/hosts"
    # debootstrap copies this machine's /etc/hostname, and systemd would set it at boot over
    # the name nspawn gives each controller (--hostname=), the name its alarms carry.
    rm -f "$build/etc/hostname"
    # Debian's etcd starts at boot on http://localhost:2379 with its own data: the tests that
    # run it configure it first. Disabled here; `systemctl enable` in a chroot only edits links.
    chroot "$build" systemctl disable --quiet etcd.service
    # Nothing in a test container is a terminal for a login.
    chroot "$build" systemctl mask --quiet console-getty.service getty@.service
fi
rm -f "$build"/var/cache/apt/archives/*.deb
touch "$build/.complete"
mv "$build" "$ROOT"
echo "base.sh: built $ROOT in $((SECONDS - t0)) s" >&2
echo "$ROOT"

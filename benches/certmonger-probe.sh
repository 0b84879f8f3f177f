#!/usr/bin/env bash
# certmonger-probe.sh CACHEDIR WORKDIR N
#
# Drives Debian's certmonger with its `local` CA, entirely inside WORKDIR, and prints
# key=value lines (or skip=REASON). Nothing is installed and no bus is used:
#   - the .debs (certmonger and those of its library dependencies not installed here) are
#     fetched with `apt-get download` into CACHEDIR and unpacked there with dpkg-deb -x;
#     `apt-get install` is not used because the package writes /etc (certmonger.conf, the
#     D-Bus policy) and its maintainer scripts start the service on the system bus;
#   - the daemon runs in the foreground with `-n -L -P WORKDIR/sock` (a private listening
#     socket only, no D-Bus connection at all) and `-c SCRIPT`, which runs the measurement
#     with CERTMONGER_PVT_ADDRESS set and stops the daemon when it ends;
#   - every state directory is redirected into WORKDIR with the CERTMONGER_*_DIR variables;
#     DBUS_*_BUS_ADDRESS point to a socket path in WORKDIR where nothing listens;
#   - certmonger's `local` CA helper is registered under another nickname with its path in
#     CACHEDIR (the built-in one is compiled as /usr/lib/certmonger/local-submit).
# Measured: N requests (RSA 2048, files) until all are MONITORING ("issue"), `getcert list`,
# `getcert resubmit` of all N (renewal, same key) until all are MONITORING again ("renew"),
# the daemon's VmRSS with N certificates tracked.
set -euo pipefail
cache=$1 work=$2 n=$3
skip() { echo "skip=$*"; exit 0; }

root=$cache/certmonger/root
if [[ ! -x $root/usr/sbin/certmonger ]]; then
    command -v apt-get >/dev/null || skip "no apt-get to fetch certmonger"
    rm -rf "$cache/certmonger"
    mkdir -p "$cache/certmonger/debs"
    pkgs=(certmonger)
    while read -r dep; do
        [[ $dep == dbus ]] && continue
        dpkg-query -W -f='${Status}' "$dep" 2>/dev/null | grep -q 'ok installed' || pkgs+=("$dep")
    done < <(apt-cache depends certmonger 2>/dev/null | sed -n 's/^ *Depends: //p' | grep -v '^<')
    (cd "$cache/certmonger/debs" && apt-get download "${pkgs[@]}" >"$cache/certmonger/download.log" 2>&1) ||
        skip "apt-get download ${pkgs[*]} failed (see $cache/certmonger/download.log)"
    for d in "$cache/certmonger/debs"/*.deb; do dpkg-deb -x "$d" "$root"; done
fi
libdirs=$(find "$root" -name '*.so*' -printf '%h\n' 2>/dev/null | sort -u | paste -sd:)
export LD_LIBRARY_PATH=$libdirs
for b in usr/sbin/certmonger usr/bin/getcert usr/lib/certmonger/local-submit; do
    [[ -x $root/$b ]] || skip "$b missing from the certmonger package"
    missing=$(ldd "$root/$b" | awk '/not found/ {print $1}' | paste -sd' ')
    [[ -z $missing ]] || skip "$b needs libraries not available here: $missing"
done

rm -rf "$work"
mkdir -p "$work"/{conf,req,cas,local,tmp,certs}
export CERTMONGER_CONFIG_DIR=$work/conf CERTMONGER_REQUESTS_DIR=$work/req \
    CERTMONGER_CAS_DIR=$work/cas CERTMONGER_LOCAL_CA_DIR=$work/local \
    CERTMONGER_TMPDIR=$work/tmp CERTMONGER_SYSTEM_LOCK_FILE=$work/lock \
    DBUS_SYSTEM_BUS_ADDRESS=unix:path=$work/no-bus DBUS_SESSION_BUS_ADDRESS=unix:path=$work/no-bus
# certmonger runs its helpers with a clean environment: a wrapper puts back what they need.
cat >"$work/local-submit" <<EOF
#!/bin/bash
export LD_LIBRARY_PATH='$libdirs' CERTMONGER_LOCAL_CA_DIR='$work/local'
exec '$root/usr/lib/certmonger/local-submit' "\$@"
EOF
cat >"$work/measure.sh" <<EOF
#!/bin/bash
set -u
export LD_LIBRARY_PATH='$libdirs'
G='$root/usr/bin/getcert' W='$work' N=$n
EOF
cat >>"$work/measure.sh" <<'EOF'
now() { date +%s%N; }
ms() { echo $(( ($(now) - $1) / 1000000 )); }
monitoring() { "$G" list 2>/dev/null | grep -c 'status: MONITORING' || true; }
waitall() {   # until N are MONITORING, at most 20 min
    local end=$(( $(date +%s) + 1200 ))
    while [ "$(monitoring)" -lt "$N" ]; do
        [ "$(date +%s)" -lt "$end" ] || { echo "error=timeout waiting for MONITORING"; exit 1; }
        sleep 0.1
    done
}
"$G" add-ca -c bench-local -e "$W/local-submit" >/dev/null || { echo "error=add-ca failed"; exit 1; }
t0=$(now)
for i in $(seq "$N"); do
    "$G" request -c bench-local -f "$W/certs/c$i.crt" -k "$W/certs/c$i.key" -N "CN=bench-$i" \
        -G RSA -g 2048 >/dev/null || { echo "error=request $i failed"; exit 1; }
done
waitall
echo "issue_ms=$(ms "$t0")"
t0=$(now); "$G" list >/dev/null; echo "list_ms=$(ms "$t0")"
echo "rss_kib=$(awk '/^VmRSS:/ {print $2}' /proc/$PPID/status)"
ids=$("$G" list | sed -n "s/^Request ID '\(.*\)':/\1/p")
before=$(cat "$W"/certs/*.crt | sha256sum)
t0=$(now)
for id in $ids; do "$G" resubmit -i "$id" >/dev/null || { echo "error=resubmit $id failed"; exit 1; }; done
sleep 0.1
waitall
echo "renew_ms=$(ms "$t0")"
after=$(cat "$W"/certs/*.crt | sha256sum)
[ "$before" != "$after" ] && echo "renewed=yes" || echo "renewed=no"
echo "rss_after_kib=$(awk '/^VmRSS:/ {print $2}' /proc/$PPID/status)"
echo "issuer=$(openssl x509 -in "$W/certs/c1.crt" -noout -issuer -nameopt oneline | sed 's/^issuer=//')"
EOF
chmod +x "$work/local-submit" "$work/measure.sh"
version=$("$root/usr/sbin/certmonger" -v 2>&1 | head -1 || true)
echo "version=$version"
timeout 1800 "$root/usr/sbin/certmonger" -n -L -P "$work/sock" -c "$work/measure.sh" \
    2>"$work/certmonger.log" || echo "error=certmonger exited with status $? (log: $work/certmonger.log)"

#!/usr/bin/env bash
# openssl-renew.sh PLAN TREE [--rotate]
#
# The baseline for `certrenewd renew`: what a StarlingX-style operator script does with the
# openssl CLI. For every leaf in PLAN (from openssl-plan.py; paths relative to TREE), serially:
#   openssl x509 -checkend (15 days)          -> skip if not due
#   [--rotate: openssl genpkey, same key type]
#   openssl req -new -key KEY -subj SUBJ      (reuses the key unless --rotate)
#   openssl x509 -req -CA ca -CAkey cakey -days 365 -extfile EXT
#   mv the new certificate (and key) over the old one
# No backup, no fsync, no verification of the result: a generous baseline.
set -eu
plan=$1 tree=$2 rotate=${3:-}
cd "$tree"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/openssl-renew.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
while IFS=$'\t' read -r crt key cacrt cakey alg subj ext; do
    if openssl x509 -checkend $((15 * 86400)) -noout -in "$crt" >/dev/null; then
        continue
    fi
    k=$key
    if [[ -n $rotate ]]; then
        case $alg in
            rsa*) openssl genpkey -algorithm RSA -pkeyopt "rsa_keygen_bits:${alg#rsa}" -out "$tmp/key" 2>/dev/null ;;
            p256) openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$tmp/key" ;;
            p384) openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-384 -out "$tmp/key" ;;
            ed25519) openssl genpkey -algorithm ED25519 -out "$tmp/key" ;;
            *) echo "openssl-renew.sh: unknown key type $alg for $crt" >&2; exit 1 ;;
        esac
        k=$tmp/key
    fi
    openssl req -new -key "$k" -subj "$subj" -out "$tmp/csr"
    openssl x509 -req -in "$tmp/csr" -CA "$cacrt" -CAkey "$cakey" -days 365 \
        -extfile "$ext" -out "$tmp/crt" 2>/dev/null
    mv "$tmp/crt" "$crt"
    if [[ -n $rotate ]]; then mv "$tmp/key" "$key"; fi
done <"$plan"

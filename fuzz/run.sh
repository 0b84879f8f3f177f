#!/usr/bin/env bash
# Fuzzes certrenewd's parsers for a bounded time with cargo-fuzz (libFuzzer + ASan).
#
#   fuzz/run.sh [SECONDS]        default 60; exits non-zero on a crash, a leak or a timeout
#   FUZZ_KEEP=1 fuzz/run.sh 600  grow the committed corpus, then minimise it
#
# The target `inventory_parse` feeds each input to pem::blocks, key::from_der,
# key::from_pem, key::spki, CertFacts::parse and the signature check. Seeds: the
# committed corpus and tests/fixtures/hostile. A crashing input is saved under
# fuzz/artifacts/inventory_parse/ (reproduce: cargo fuzz run inventory_parse FILE).
#
# cargo-fuzz passes nightly-only flags (-Zsanitizer=address); RUSTC_BOOTSTRAP=1 lets the
# stable toolchain accept them (its sysroot ships the ASan runtime). cargo-fuzz itself is
# installed from crates.io when missing. The first build compiles every dependency with
# the sanitizer: a few minutes on 2 CPUs.
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-60}
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked --quiet
fi
export RUSTC_BOOTSTRAP=1
seeds=corpus/inventory_parse
if [[ ${FUZZ_KEEP:-} == 1 ]]; then
    work=$seeds
else
    # New inputs go to a scratch copy, so a CI run leaves the checkout as it was.
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    cp -R "$seeds"/. "$work"/
fi
# cargo fuzz would rewrite a stale fuzz/Cargo.lock and leave the checkout changed: refuse.
if ! cargo metadata --locked --offline --format-version 1 >/dev/null 2>&1 &&
    ! cargo metadata --locked --format-version 1 >/dev/null; then
    echo "fuzz/Cargo.lock is out of date with fuzz/Cargo.toml or ../Cargo.toml: run" \
        "'cp Cargo.lock fuzz/ && cargo metadata --manifest-path fuzz/Cargo.toml >/dev/null' and commit it" >&2
    exit 1
fi
cargo fuzz build inventory_parse
cargo fuzz run inventory_parse "$work" ../tests/fixtures/hostile -- \
    -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
if [[ ${FUZZ_KEEP:-} == 1 ]]; then
    cargo fuzz cmin inventory_parse "$seeds"
fi

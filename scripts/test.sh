#!/usr/bin/env bash
# The whole test suite, with all set-up on a fresh Debian machine (run as root for the
# system packages and for the tests that need root; elsewhere they say why they skip).
# `scripts/test.sh --setup-only` does the set-up (packages, the pinned Rust toolchain) and
# stops.
set -euo pipefail
cd "$(dirname "$0")/.."
setup_only=false
[ "${1:-}" = --setup-only ] && setup_only=true

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  need=()
  for pkg in libnbd-bin python3-libnbd qemu-utils fio nbdkit fuse3 e2fsprogs fonts-dejavu-core openssl libssl-dev pkg-config systemd man-db groff-base fsmark; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
  done
  if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
fi

# The pinned toolchain (rust-toolchain.toml), installed with rustup when missing. Without
# rustup: Debian 13 and later package it (installed here as root); on older releases install
# rustup first by its own instructions (it puts itself in ~/.cargo/bin), or put exactly this
# Rust version's cargo on PATH.
toolchain=$(sed -n 's/^channel = "\(.*\)"$/\1/p' rust-toolchain.toml)
if ! command -v rustup >/dev/null && [ -x "$HOME/.cargo/bin/rustup" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v rustup >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq
  if apt-cache show rustup 2>/dev/null | grep '^Version:' >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rustup >/dev/null
  fi
fi
if command -v rustup >/dev/null; then
  if ! rustup toolchain list | grep "^$toolchain-" >/dev/null; then
    echo "== installing the pinned Rust toolchain $toolchain"
    rustup toolchain install "$toolchain" --profile minimal --component rustfmt,clippy
  fi
  rustup component add --toolchain "$toolchain" rustfmt clippy >/dev/null 2>&1 || true
elif ! cargo --version 2>/dev/null | grep "^cargo $toolchain " >/dev/null; then
  echo "the pinned Rust toolchain $toolchain is missing and rustup is not installed: install" \
    "rustup (Debian 13+: apt-get install rustup; else rustup's own installer), or put" \
    "cargo $toolchain on PATH" >&2
  exit 1
fi
if "$setup_only"; then
  echo "set-up done: $(cargo --version)"
  exit 0
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo clippy --workspace --all-targets --locked --features zramd/tls-psk -- -D warnings
echo "== cargo doc (a broken or private intra-doc link is an error)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --features zramd/tls-psk
echo "== cargo test"
cargo test --workspace --locked --release --features zramd/tls-psk -- --nocapture
echo "== shuttle model checks (the locking protocols of zsmalloc, afmalloc, zbud and malloc)"
RUSTFLAGS="--cfg shuttle" CARGO_TARGET_DIR=target/shuttle \
  cargo test -p zsmalloc --locked --release --test shuttle_locking \
  --test shuttle_merge --test shuttle_afmalloc --test shuttle_zbud_malloc

echo "== fuzz smoke (cargo-fuzz, ${FUZZ_SECONDS:=15} s per target)"
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "fuzz smoke SKIPPED: no nightly toolchain (cargo-fuzz needs one); the decoders' and parsers' smoke tests above ran on stable"
elif ! command -v cargo-fuzz >/dev/null && ! cargo install cargo-fuzz --locked --quiet; then
  echo "fuzz smoke SKIPPED: cargo-fuzz could not be installed"
else
  (
    cd fuzz
    cargo +nightly fuzz build
    for target in $(cargo +nightly fuzz list); do
      cargo +nightly fuzz run "$target" -- -max_total_time="$FUZZ_SECONDS" 2>&1 | tail -n 1
    done
  )
fi

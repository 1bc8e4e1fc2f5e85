#!/bin/bash
# Issue 16's many-core measurements, made ready here and run on a lent many-core machine in
# one call (the machine has no network and only the working tree travels, 64 MiB at most):
#
#   LINUX_TAR=linux.tar scripts/device-bench.sh pack
#       here: stripped release binaries and the first DEVICE_BENCH_MB (320) MB of the Linux
#       source tar, xz-compressed, in .device/ (ignored by git; carry it)
#   scripts/device-bench.sh run
#       there, as root with OUT set: the library path beside the kernel's zram at 1-16
#       threads, the pool's scaling curve, and the NBD bench and its curve over 1-16
#       connections where nbdkit, nbdcopy and qemu-img are installed; one text file per
#       measurement in $OUT
#
# Nothing depends on it: CI never has such a machine. Make the tar with
# `xz -dc /usr/src/linux-source-6.1.tar.xz > linux.tar` (Debian's linux-source-6.1).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.device

case "${1:-}" in
pack)
  tar=${LINUX_TAR:?set LINUX_TAR to the uncompressed Linux source tar}
  mb=${DEVICE_BENCH_MB:-320}
  cargo build --release --locked -p zramd -p lab
  rm -rf "$dir"
  mkdir -p "$dir"
  cp target/release/zramd target/release/zramd-lab "$dir"/
  strip "$dir/zramd" "$dir/zramd-lab"
  head -c $((mb * 1000000)) "$tar" | xz -T0 -6 -c >"$dir/input.tar.xz"
  total=$(du -cb "$dir"/* | tail -n 1 | cut -f 1)
  echo "$dir: $((total / 1000000)) MB (the working tree travels too: keep the sum under 64 MiB)"
  ;;
run)
  out=${OUT:?set OUT to the folder the results go to}
  for f in zramd zramd-lab input.tar.xz; do
    [ -e "$dir/$f" ] || { echo "$dir/$f is missing: run '$0 pack' here first and carry $dir" >&2; exit 2; }
  done
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  cp "$dir/zramd" "$dir/zramd-lab" "$work"/
  if command -v xz >/dev/null; then
    xz -dc -T0 "$dir/input.tar.xz" >"$work/input.tar"
  else
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
      "$dir/input.tar.xz" "$work/input.tar"
  fi
  {
    echo "cpus: $(nproc)"
    uname -r
    grep -m 1 "model name" /proc/cpuinfo || true
    free -m
    cat /sys/block/zram*/comp_algorithm 2>/dev/null | head -n 1 || echo "no zram device yet"
  } >"$out/machine.txt" 2>&1
  # Each run is bounded; a run cut short still leaves what it printed.
  bench() {
    local name=$1 limit=$2
    shift 2
    echo "== $name: zramd-lab $*"
    timeout "$limit" "$work/zramd-lab" "$@" >"$out/$name.txt" 2>&1 || echo "exit $?" >>"$out/$name.txt"
    tail -n 12 "$out/$name.txt"
  }
  bench device_lz4 240 bench --input "$work/input.tar" --algorithm lz4 --threads 1,2,4,8,16 --repeat 2
  bench pool 120 bench pool --threads 1,2,4,8,16 --repeat 3
  if command -v nbdkit >/dev/null && command -v nbdcopy >/dev/null && command -v qemu-img >/dev/null; then
    bench nbd 150 bench nbd --input "$work/input.tar" --repeat 1
    bench nbd_connections 120 bench nbd --input "$work/input.tar" --repeat 1 --connections 1,2,4,8,16 --fio-seconds 2
  else
    echo "nbd: SKIPPED (nbdkit, nbdcopy or qemu-img is not installed)" | tee "$out/nbd.txt" "$out/nbd_connections.txt"
  fi
  ;;
*)
  echo "usage: LINUX_TAR=linux.tar $0 pack | $0 run (see the comment at the top)" >&2
  exit 2
  ;;
esac

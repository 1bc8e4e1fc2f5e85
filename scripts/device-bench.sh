#!/bin/bash
# Issue 16's many-core measurements, made ready here and run on a lent many-core machine in
# one call (the machine has no network and only the working tree travels, 64 MiB at most):
#
#   LINUX_TAR=linux.tar scripts/device-bench.sh pack
#       here: stripped release binaries, the first DEVICE_BENCH_MB (320) MB of the Linux
#       source tar and, where installed here, the NBD tools with their libraries, each
#       xz-compressed, in .device/ (ignored by git; carry it)
#   scripts/device-bench.sh run
#       there, as root with OUT set: the library path beside the kernel's zram at 1-16
#       threads (with and without faulting fresh pages in ahead), the pool's scaling curve, and the NBD bench and its curve over 1-16
#       connections (with the machine's own nbdkit, nbdcopy and qemu-img, else the carried
#       ones); one text file per measurement in $OUT. About 2 minutes on a 16-core machine.
#       DEVICE_BENCH_REPEAT (2) sets the library path's rounds per thread count.
#       Carry .device/zramd.xz, .device/zramd-lab.xz, .device/input.tar.xz and
#       .device/tools.tar.xz (all of .device is over the limit once perf is packed).
#   scripts/device-bench.sh profile
#       there, likewise: perf profiles of the library-path bench at 1 and 4 streams
#       (DEVICE_PROFILE_THREADS), flat reports and the samples' stacks. Carry the binaries,
#       the input and .device/perf.tar.xz.
#
# Nothing depends on it: CI never has such a machine. Make the tar with
# `xz -dc /usr/src/linux-source-6.1.tar.xz > linux.tar` (Debian's linux-source-6.1).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.device

# bundle NAME TOOL...: TOOLs with every library they load and this machine's dynamic loader,
# in $dir/NAME.tar.xz, so the lent machine need not have them. Each runs through a wrapper
# (NAME/wrap/TOOL) that starts it with the carried loader and libraries, so the lent
# machine's own C library does not matter; nbdkit's wrapper names the carried memory plugin
# by its path. Bundles nothing (and says so) when a TOOL is not installed here; any other
# failure ends the script (called plainly, never in a condition, so `set -e` holds).
bundle() {
  local name=$1 tool stage libs plugin=
  shift
  for tool in "$@"; do
    if ! command -v "$tool" >/dev/null; then
      echo "$name: $tool is not installed here; the lent machine needs its own"
      return 0
    fi
  done
  stage=$(mktemp -d)
  mkdir -p "$stage/$name/bin" "$stage/$name/lib" "$stage/$name/wrap"
  for tool in "$@"; do
    cp "$(command -v "$tool")" "$stage/$name/bin/"
    if [ "$tool" = nbdkit ]; then
      plugin=$(nbdkit --dump-config | sed -n 's/^plugindir=//p')/nbdkit-memory-plugin.so
      cp "$plugin" "$stage/$name/lib/"
    fi
  done
  # ldd prints "name => path (address)" for libraries, "path (address)" for the loader and
  # "name => not found" for a library it cannot find (then the bundle would not run).
  libs=$(for f in "$stage/$name"/bin/* $plugin; do ldd "$f"; done)
  if grep -q "not found" <<<"$libs"; then
    echo "$name: a library is missing here:" >&2
    grep "not found" <<<"$libs" >&2
    exit 1
  fi
  awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' <<<"$libs" | sort -u |
    while read -r lib; do cp -L "$lib" "$stage/$name/lib/"; done
  # In each wrapper, $t is the bundle's folder (found at run time) and the tool is named here.
  for tool in "$@"; do
    {
      echo '#!/bin/sh'
      echo 't=$(cd "$(dirname "$0")/.." && pwd)'
      if [ "$tool" = nbdkit ]; then
        echo 'for a do shift; [ "$a" = memory ] && a=$t/lib/nbdkit-memory-plugin.so; set -- "$@" "$a"; done'
      fi
      echo "exec \"\$t/lib/ld-linux-x86-64.so.2\" --library-path \"\$t/lib\" \"\$t/bin/$tool\" \"\$@\""
    } >"$stage/$name/wrap/$tool"
    chmod +x "$stage/$name/wrap/$tool"
  done
  tar -C "$stage" -cf - "$name" | xz -T0 -9 -c >"$dir/$name.tar.xz"
  rm -rf "$stage"
}

# The NBD bench's tools (crates/lab/src/bench/nbd.rs asks for each).
nbd_tools=(nbdkit nbdcopy qemu-img qemu-io)
have_nbd_tools() {
  local tool
  for tool in "${nbd_tools[@]}"; do
    command -v "$tool" >/dev/null || return 1
  done
}

case "${1:-}" in
pack)
  tar=${LINUX_TAR:?set LINUX_TAR to the uncompressed Linux source tar}
  mb=${DEVICE_BENCH_MB:-320}
  cargo build --release --locked -p zramd -p lab
  rm -rf "$dir"
  mkdir -p "$dir"
  # Symbols stay (debug info goes), for `profile`'s reports.
  for f in zramd zramd-lab; do
    cp "target/release/$f" "$dir/$f"
    strip --strip-debug "$dir/$f"
    xz -T0 -9 "$dir/$f"
  done
  head -c $((mb * 1000000)) "$tar" | xz -T0 -6 -c >"$dir/input.tar.xz"
  # fio is left out: its storage engines pull in over 20 MB of libraries.
  bundle tools "${nbd_tools[@]}"
  bundle perf perf
  for mode in run:tools profile:perf; do
    set -- "$dir"/zramd.xz "$dir"/zramd-lab.xz "$dir"/input.tar.xz
    [ -e "$dir/${mode#*:}.tar.xz" ] && set -- "$@" "$dir/${mode#*:}.tar.xz"
    total=$(du -cb "$@" | tail -n 1 | cut -f 1)
    echo "${mode%:*}: carry $* ($((total / 1000000)) MB; the working tree travels too: keep the sum under 64 MiB)"
  done
  ;;
run | profile)
  out=${OUT:?set OUT to the folder the results go to}
  for f in zramd.xz zramd-lab.xz input.tar.xz; do
    [ -e "$dir/$f" ] || { echo "$dir/$f is missing: run '$0 pack' here first and carry it" >&2; exit 2; }
  done
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # unxz FILE.xz DEST, with python's lzma where xz is not installed
  unxz_to() {
    if command -v xz >/dev/null; then
      xz -dc -T0 "$1" >"$2"
    else
      python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"
    fi
  }
  # unbundle NAME: the carried bundle's wrappers go first on PATH.
  unbundle() {
    unxz_to "$dir/$1.tar.xz" "$work/$1.tar"
    tar -C "$work" -xf "$work/$1.tar"
    export PATH=$work/$1/wrap:$PATH
    echo "$1: the carried ones ($dir/$1.tar.xz)"
  }
  for f in zramd zramd-lab; do
    unxz_to "$dir/$f.xz" "$work/$f"
    chmod +x "$work/$f"
  done
  unxz_to "$dir/input.tar.xz" "$work/input.tar"
  {
    echo "cpus: $(nproc)"
    uname -r
    grep -m 1 "model name" /proc/cpuinfo || true
    free -m
    cat /sys/kernel/mm/transparent_hugepage/enabled || true
    [ -e /sys/class/zram-control ] || modprobe zram num_devices=0 || true
    ls /sys/class/zram-control || true
    command -v nbdkit nbdcopy qemu-img fio perf || true
  } >"$out/machine.txt" 2>&1
  ;;&
profile)
  # Where each side's time goes, at 1 and 4 streams (the kernel's frames are told apart by
  # their system call: pwrite64/pread64 is the kernel's zram, the rest zramd's faults and
  # madvise calls; user frames are zramd's).
  [ -e "$dir/perf.tar.xz" ] || { echo "$dir/perf.tar.xz is missing: pack where perf is installed" >&2; exit 2; }
  unbundle perf
  echo -1 >/proc/sys/kernel/perf_event_paranoid || true
  echo 0 >/proc/sys/kernel/kptr_restrict || true
  for t in ${DEVICE_PROFILE_THREADS:-1 4}; do
    timeout 120 perf record -F 499 -g -o "$work/p$t.data" -- \
      "$work/zramd-lab" bench --input "$work/input.tar" --algorithm lz4 --threads "$t" --repeat 2 \
      >"$out/profile_bench_$t.txt" 2>&1 || echo "exit $?" >>"$out/profile_bench_$t.txt"
    tail -n 3 "$out/profile_bench_$t.txt"
    perf report -i "$work/p$t.data" --no-children -g none --sort dso,sym 2>/dev/null |
      sed -n '/^ *[0-9]/p' | sed -n 1,150p >"$out/profile_flat_$t.txt" || true
    sed -n 1,25p "$out/profile_flat_$t.txt"
    perf script -i "$work/p$t.data" -F tid,ip,sym 2>/dev/null | xz -T0 -6 >"$out/profile_stacks_$t.txt.xz" || true
  done
  ;;
run)
  # DEVICE_BENCH_TOOLS=carried uses the carried tools even where the machine has its own.
  if [ -e "$dir/tools.tar.xz" ] && { [ "${DEVICE_BENCH_TOOLS:-}" = carried ] || ! have_nbd_tools; }; then
    unbundle tools
  fi
  # Each run is bounded; a run cut short still leaves what it printed.
  bench() {
    local name=$1 limit=$2
    shift 2
    echo "== $name: zramd-lab $*"
    timeout "$limit" "$work/zramd-lab" "$@" >"$out/$name.txt" 2>&1 || echo "exit $?" >>"$out/$name.txt"
    tail -n 12 "$out/$name.txt"
  }
  repeat=${DEVICE_BENCH_REPEAT:-2}
  bench device_lz4 180 bench --input "$work/input.tar" --algorithm lz4 --threads 1,2,4,8,16 --repeat "$repeat"
  # The same without the page source's thread that faults fresh pages in ahead.
  bench device_lz4_no_ahead 180 bench --input "$work/input.tar" --algorithm lz4 --threads 1,2,4,8,16 --repeat "$repeat" --no-fault-ahead
  bench pool 90 bench pool --threads 1,2,4,8,16 --repeat 3
  if have_nbd_tools; then
    bench nbd 120 bench nbd --input "$work/input.tar" --repeat 1
    bench nbd_connections 120 bench nbd --input "$work/input.tar" --repeat 1 --connections 1,2,4,8,16 --fio-seconds 2
  else
    echo "nbd: SKIPPED (one of ${nbd_tools[*]} is not installed)" | tee "$out/nbd.txt" "$out/nbd_connections.txt"
  fi
  ;;
*)
  echo "usage: LINUX_TAR=linux.tar $0 pack | $0 run | $0 profile (see the comment at the top)" >&2
  exit 2
  ;;
esac

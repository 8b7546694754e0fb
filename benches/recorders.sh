#!/bin/bash
# What each recorder of a GC's system calls costs (issue 41, point 3): the same GC
# (`chunkscope gc --strategy lru`, both phases, directly on a store) plain, under strace
# (the options `trace import` reads), under bpftrace (mount-scripts/gc-syscalls.bt), and
# through a chunkscope mount of the store (non-shadow, untraced and traced); every process
# pinned to CPU 0 (`taskset -c 0`: waking the other vCPU costs more than a call here), and
# once more with bpftrace's reader on CPU 1 (as on a host with CPUs to spare: its reader
# formats every line, and on the GC's CPU it takes the GC's time).
#
#   bash benches/recorders.sh [STORE] [RUNS]      (as root: bpftrace, FUSE)
#   defaults: /dev/shm/chunkscope-recorders (the small preset, made if missing), 3 runs
#
# Each run's seconds, the medians, and the cost a call over the plain run: (median -
# plain median) / the calls strace saw on the store (utimensat, newfstatat, statx,
# getdents64, unlinkat, openat). A first GC removes the garbage, so that every run after it
# touches and stats the same chunks.
set -euo pipefail
STORE=${1:-/dev/shm/chunkscope-recorders}
RUNS=${2:-3}
BIN=${CHUNKSCOPE:-$(cd "$(dirname "$0")/.." && pwd)/target/release/chunkscope}
SCRIPT=$(cd "$(dirname "$0")/.." && pwd)/mount-scripts/gc-syscalls.bt
[ -x "$BIN" ] || { echo "build first: cargo build --release (or set CHUNKSCOPE)" >&2; exit 2; }
if [ ! -d "$STORE/.chunks" ]; then
    "$BIN" gen --quiet --preset small --out "$STORE"
fi
WORK=$(mktemp -d /dev/shm/chunkscope-recorders.XXXXXX)
MNT=$WORK/mnt
mkdir -p "$MNT"
MOUNT_PID=
TRACEFS=
cleanup() {
    if mountpoint -q "$MNT"; then umount "$MNT" || umount -l "$MNT"; fi
    if [ -n "$MOUNT_PID" ]; then wait "$MOUNT_PID" 2>/dev/null || true; fi
    if [ -n "$TRACEFS" ]; then umount /sys/kernel/tracing || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT
if [ ! -e /sys/kernel/tracing/events ]; then
    mount -t tracefs nodev /sys/kernel/tracing && TRACEFS=1
fi
GC=(taskset -c 0 "$BIN" gc --strategy lru --no-atime-check --no-lock)
"${GC[@]}" "$STORE" >/dev/null
seconds() { /usr/bin/time -f '%e' -o "$WORK/t" "$@" >/dev/null 2>"$WORK/err" || { cat "$WORK/err" >&2; exit 1; }; cat "$WORK/t"; }
# bpftrace with its reader on CPU $1 (the GC on CPU 0): the GC waits on a FIFO until the
# script is attached. The traced pid must be the GC's own (sh execs taskset, which execs
# it): timed from the FIFO's release to its exit; the script stops by itself at that exit.
# Prints the seconds; checks that every call was recorded and none lost.
under_bpftrace() {
    rm -f "$WORK/go"; mkfifo "$WORK/go"
    sh -c "read x < '$WORK/go'; exec ${GC[*]} '$STORE' >/dev/null" &
    local gc_pid=$!
    BPFTRACE_STRLEN=200 taskset -c "$1" bpftrace "$SCRIPT" "$gc_pid" > "$WORK/gc.bpf.log" 2>/dev/null &
    local bt_pid=$!
    until grep -q '^# chunkscope' "$WORK/gc.bpf.log" 2>/dev/null; do sleep 0.05; done
    local t0 t1
    t0=$(date +%s.%N)
    echo go > "$WORK/go"
    wait "$gc_pid"
    t1=$(date +%s.%N)
    wait "$bt_pid"
    if grep -q '^Lost ' "$WORK/gc.bpf.log"; then
        echo "bpftrace lost events: $(grep '^Lost ' "$WORK/gc.bpf.log" | head -1)" >&2; exit 1
    fi
    python3 -c "print(f'{$t1 - $t0:.2f}')"
}
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
mounted() {
    taskset -c 0 "$BIN" mount --store "$STORE" --mountpoint "$MNT" "$@" 2>"$WORK/mount.log" &
    MOUNT_PID=$!
    for _ in $(seq 200); do mountpoint -q "$MNT" && return; sleep 0.05; done
    cat "$WORK/mount.log" >&2; exit 1
}
unmounted() { umount "$MNT"; wait "$MOUNT_PID"; MOUNT_PID=; }
for i in $(seq "$RUNS"); do
    p=$(seconds "${GC[@]}" "$STORE")
    s=$(seconds taskset -c 0 strace -f -tt -T -y -o "$WORK/gc.strace" \
        -e trace=utimensat,newfstatat,statx,getdents64,unlinkat,openat "${GC[@]:3}" "$STORE")
    b=$(under_bpftrace 0)
    b1=$(under_bpftrace 1)
    bt_calls=$(grep -c '^X ' "$WORK/gc.bpf.log" || true)
    mounted
    o=$(seconds "${GC[@]}" "$MNT")
    unmounted
    mounted --trace "$WORK/gc.trace"
    ot=$(seconds "${GC[@]}" "$MNT")
    unmounted
    echo "run $i: plain $p s, strace $s s, bpftrace $b s, bpftrace on CPU 1 $b1 s ($bt_calls calls), mount $o s, traced mount $ot s"
    echo "$p" >> "$WORK/plain"; echo "$s" >> "$WORK/strace"; echo "$b" >> "$WORK/bpftrace"
    echo "$b1" >> "$WORK/bpftrace-cpu1"
    echo "$o" >> "$WORK/mount"; echo "$ot" >> "$WORK/traced"
done
calls=$(grep -cE '^[0-9]+ +[0-9:.]+ +(utimensat|newfstatat|statx|getdents64|unlinkat|openat)\(' "$WORK/gc.strace")
P=$(median < "$WORK/plain")
echo "calls $calls (the last strace run's)"
for r in plain strace bpftrace bpftrace-cpu1 mount traced; do
    m=$(median < "$WORK/$r")
    echo "$r: median $m s, $(python3 -c "print(f'{($m-$P)*1e6/$calls:.1f}')") us a call over plain"
done

#!/bin/bash
# Modelled phase-1 time of each GC strategy on a generated store, through the overlay with a
# cost model (cold cache at each mount), side by side in one run.
#
#   bash benches/phase1_model.sh [PRESET] [MODEL] [WORKDIR]
#   defaults: small zfs-hdd /dev/shm/chunkscope-bench
#
# Each strategy runs phase 1 only (gc --phase mark) on a shadow mount of the same store, so
# every strategy sees the same store and the same inode numbers; --time-scale 0 records the
# modelled costs without waiting for them. Prints a Markdown table, then the same traces
# replayed with other cache sizes (chunkscope replay --cache).
set -euo pipefail
PRESET=${1:-small}
MODEL=${2:-zfs-hdd}
WORK=${3:-/dev/shm/chunkscope-bench}
BIN=${CHUNKSCOPE:-$(dirname "$0")/../target/release/chunkscope}
[ -x "$BIN" ] || { echo "build first: cargo build --release (or set CHUNKSCOPE)" >&2; exit 2; }

mkdir -p "$WORK"
STORE=$WORK/store-$PRESET
if [ ! -d "$STORE/.chunks" ]; then
    "$BIN" gen --quiet --preset "$PRESET" --out "$STORE"
fi
MNT=$WORK/mnt
mkdir -p "$MNT"
MOUNT_PID=
cleanup() {
    if mountpoint -q "$MNT"; then umount "$MNT" || umount -l "$MNT"; fi
    if [ -n "$MOUNT_PID" ]; then wait "$MOUNT_PID" 2>/dev/null || true; fi
}
trap cleanup EXIT

echo "| strategy | modelled phase 1 | block misses | prefetched | blocks written back (time, async) | utimensat | listings | wall time |"
echo "|---|---|---|---|---|---|---|---|"
for S in naive lru prefetch batched inode-order; do
    "$BIN" mount --store "$STORE" --mountpoint "$MNT" --shadow --model "$MODEL" \
        --time-scale 0 --trace "$WORK/$S.trace" 2>"$WORK/mount-$S.log" &
    MOUNT_PID=$!
    for _ in $(seq 200); do mountpoint -q "$MNT" && break; sleep 0.05; done
    START=$(date +%s.%N)
    "$BIN" gc --strategy "$S" --phase mark --no-lock --no-atime-check \
        --json="$WORK/gc-$S.json" "$MNT" >/dev/null
    END=$(date +%s.%N)
    umount "$MNT"
    wait "$MOUNT_PID"
    MOUNT_PID=
    python3 - "$S" "$WORK/mount-$S.log" "$WORK/gc-$S.json" "$START" "$END" <<'PY'
import json, sys
s, log, gc, start, end = sys.argv[1:]
line = next(l for l in open(log) if l.startswith("chunkscope: model "))
t = json.loads(line[line.index("{"):])
c = json.load(open(gc))["counters"]
def span(ns):
    x = ns / 1e9
    return f"{x/3600:.2f} h" if x >= 3600 else f"{x/60:.1f} min" if x >= 60 else f"{x:.1f} s"
print(f"| {s} | {span(t['ns'])} | {t['misses']} | {t['prefetched']} | "
      f"{t['blocks_written']} ({span(t['writeback_ns'])}) | {c['utimensat_calls']} | {c['listings']} | "
      f"{float(end) - float(start):.1f} s |")
PY
done

echo
echo "Modelled phase 1 by cache size (the same traces, chunkscope replay --model $MODEL --cache SIZE):"
echo
echo "| strategy | 64MiB | 256MiB | 1GiB | 4GiB |"
echo "|---|---|---|---|---|"
for S in naive lru prefetch batched inode-order; do
    ROW="| $S |"
    for C in 64MiB 256MiB 1GiB 4GiB; do
        NS=$("$BIN" replay --json --model "$MODEL" --cache "$C" "$WORK/$S.trace" |
            python3 -c 'import json,sys; print(json.load(sys.stdin)["totals"]["ns"])')
        ROW="$ROW $(python3 -c "print(f'{$NS/6e10:.1f} min')") |"
    done
    echo "$ROW"
done

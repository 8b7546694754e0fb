#!/bin/bash
# Phase 2 of an S3 datastore's GC in key order (PBS 4) and in inode order (`gc --s3-page-order
# inode`) on a real filesystem over an emulated disk, beside what `simulate` predicts for the
# same store (issue 50: the model's inode-order prediction checked on real metadata).
#
#   OUT/backing/disk.img -- chunkscope mount --disk DISK --> OUT/disk
#       losetup --direct-io=on OUT/disk/disk.img -> mkfs.ext4 -> OUT/fs (the local cache)
#   the bucket on s3s-fs in OUT/buckets (tmpfs: S3's own latency is not the question here)
#
# The store is generated with the disk model off (as `chunkscope testbed` builds its image),
# kept as a golden image and bucket, and each run starts from them: the image and the bucket
# restored, the mount started with the disk, the page cache dropped, a whole GC (lru, the
# S3 page order given). The phases' times are the GC's own; the device's reads are the loop
# device's over the whole run. The prediction: `survey --s3-bucket` of the golden store, then
# `simulate --survey` with the filesystem's model on the same disk (its span and geometry
# fitted to the surveyed filesystem), the host's measured time per device read, and a cache
# that holds everything (the runs have the host's free memory as their page cache); its
# reads column is the model's reads.
#
#   bash benches/s3_page_order_disk.sh [SCALE] [RUNS] [DISK]   (as root; s3s-fs on the PATH)
#   defaults: the small preset at scale 2 (about 106k chunk objects), 1 run, hdd-7200;
#   IMG=8G the image's size; KEEP=1 keeps OUT (named on standard error); ORDERS="key" runs
#   one order; TRACE=1 traces the disk (OUT/ORDER.RUN.disk.trace, the GC's phases marked)
set -euo pipefail
SCALE=${1:-2}
RUNS=${2:-1}
DISK=${3:-hdd-7200}
IMG=${IMG:-8G}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${CHUNKSCOPE:-$ROOT/target/release/chunkscope}
[ -x "$BIN" ] || { echo "build first: cargo build --release (or set CHUNKSCOPE)" >&2; exit 2; }
command -v s3s-fs > /dev/null || { echo "s3s-fs not found: cargo install s3s-fs@0.14.1 --features binary --locked" >&2; exit 2; }
OUT=$(mktemp -d /dev/shm/chunkscope-s3disk.XXXXXX)
mkdir "$OUT/backing" "$OUT/disk" "$OUT/fs" "$OUT/buckets"
SERVER= MOUNT= LOOP=
cleanup() {
    mountpoint -q "$OUT/fs" && umount "$OUT/fs"
    [ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null
    if [ -n "$MOUNT" ]; then
        mountpoint -q "$OUT/disk" && umount "$OUT/disk"
        wait "$MOUNT" 2>/dev/null || true
    fi
    if [ -n "$SERVER" ]; then kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; fi
    if [ -n "${KEEP:-}" ]; then echo "kept $OUT" >&2; else rm -rf "$OUT"; fi
}
trap cleanup EXIT

export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret-key
RUST_LOG=s3s_fs=info NO_COLOR=1 s3s-fs --host 127.0.0.1 --port 0 \
    --access-key "$AWS_ACCESS_KEY_ID" --secret-key "$AWS_SECRET_ACCESS_KEY" "$OUT/buckets" \
    > "$OUT/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 100); do grep -q "server is running at" "$OUT/server.log" && break; sleep 0.1; done
export AWS_ENDPOINT_URL=$(sed -n 's/.*server is running at //p' "$OUT/server.log" | head -1)
[ -n "$AWS_ENDPOINT_URL" ] || { echo "s3s-fs did not start: $(cat "$OUT/server.log")" >&2; exit 2; }

# The disk mount (DISK, or none), the loop device and the filesystem on it.
up() {
    "$BIN" mount --store "$OUT/backing" --mountpoint "$OUT/disk" ${1:+--disk "$1"} \
        ${2:+--trace "$2"} > "$OUT/mount.log" 2>&1 &
    MOUNT=$!
    for _ in $(seq 300); do mountpoint -q "$OUT/disk" && break; sleep 0.1; done
    mountpoint -q "$OUT/disk" || { echo "the disk mount did not come up: $(cat "$OUT/mount.log")" >&2; exit 2; }
    LOOP=$(losetup --direct-io=on -f --show "$OUT/disk/disk.img")
}
down() {
    umount "$OUT/fs"
    losetup -d "$LOOP"; LOOP=
    umount "$OUT/disk"; wait "$MOUNT"; MOUNT=
}
reads() { awk '{ print $1 }' "/sys/block/$(basename "$LOOP")/stat"; }

truncate -s "$IMG" "$OUT/backing/disk.img"
up ""
mkfs.ext4 -q -F "$LOOP"
mount "$LOOP" "$OUT/fs"
STORE=$OUT/fs/store
start=$(date +%s)
"$BIN" gen --quiet --preset small --scale "$SCALE" --backend s3 --s3-bucket pbs-disk --out "$STORE"
echo "gen --preset small --scale $SCALE --backend s3: $(( $(date +%s) - start )) s," \
    "$(find "$OUT/buckets/pbs-disk/.chunks" -type f | wc -l) chunk objects," \
    "$(find "$STORE/.chunks" -type f | wc -l) local files; ext4 on $DISK, image $IMG"
"$BIN" survey --s3-bucket pbs-disk --out "$OUT/store.survey" "$STORE" > "$OUT/survey.txt"
# What a device read costs the host with the disk costing nothing (the filesystem, the loop
# device, the FUSE round trip), as `chunkscope testbed` measures it: every 16th chunk
# directory listed cold, then warm; the difference over the reads the loop device served.
mount -o remount,noatime "$OUT/fs"
for i in $(seq 0 16 65535); do printf '%s/.chunks/%04x\n' "$STORE" "$i"; done > "$OUT/dirs"
pass() { xargs ls -f < "$OUT/dirs" > /dev/null; }
sync; echo 3 > /proc/sys/vm/drop_caches
before=$(reads); t0=$(date +%s%N); pass; t1=$(date +%s%N); served=$(( $(reads) - before ))
pass; t2=$(date +%s%N)
IO_NS=$(( ((t1 - t0) - (t2 - t1)) / (served > 0 ? served : 1) ))
echo "the host's time per device read: $IO_NS ns ($served reads)"
down
# The golden copies each run starts from: the image, and the bucket as the server keeps it.
cp --sparse=always "$OUT/backing/disk.img" "$OUT/golden.img"
cp -a "$OUT/buckets/pbs-disk" "$OUT/golden-bucket"

printf '%-6s %4s %10s %10s %10s %14s %10s %9s\n' order run phase1 phase2 phase3 "device reads" stats listings
for run in $(seq "$RUNS"); do
    for order in ${ORDERS:-key inode}; do
        cp --sparse=always "$OUT/golden.img" "$OUT/backing/disk.img"
        rm -rf "$OUT/buckets/pbs-disk"; cp -a "$OUT/golden-bucket" "$OUT/buckets/pbs-disk"
        up "$DISK,span=$(numfmt --from=iec "$IMG")" "${TRACE:+$OUT/$order.$run.disk.trace}"
        mount -o relatime "$LOOP" "$OUT/fs"
        sync; echo 3 > /proc/sys/vm/drop_caches
        before=$(reads)
        "$BIN" gc --no-atime-check --s3-bucket pbs-disk --s3-page-order "$order" \
            ${TRACE:+--mark-mount "$OUT/disk"} \
            --json="$OUT/$order.$run.json" "$STORE" > "$OUT/$order.$run.log" 2>&1
        after=$(reads)
        down
        jq -r --arg o "$order" --arg r "$run" --arg reads "$(( after - before ))" '
            .counters | [$o, $r, "\(.phase1_seconds * 10 | round / 10) s",
              "\(.phase2_seconds * 10 | round / 10) s", "\(.phase3_seconds * 10 | round / 10) s",
              $reads, .stat_calls, .sweep_listings] | @tsv' "$OUT/$order.$run.json" |
            awk -F'\t' '{ printf "%-6s %4s %10s %10s %10s %14s %10s %9s\n", $1, $2, $3, $4, $5, $6, $7, $8 }'
        if [ -n "${TRACE:-}" ]; then
            # Per phase, the disk's reads and writes and the time its model held them.
            "$BIN" trace export --format csv "$OUT/$order.$run.disk.trace" 2> /dev/null | awk -F, '
                NR > 1 && $4 == "marker" { split($13, m, " "); if (m[2] == "start") ph = m[1]; next }
                NR > 1 && ($4 == "read" || $4 == "write") { n[ph, $4]++; t[ph, $4] += $10 }
                END { for (p = 1; p <= 3; p++) { k = "phase" p
                    printf "         %s: %d reads (the disk %.1f s), %d writes (%.1f s)\n", k,
                        n[k, "read"], t[k, "read"] / 1e9, n[k, "write"], t[k, "write"] / 1e9 } }'
        fi
    done
done

# The model: ext4-hdd with the host's time per read (replay prints a preset as a model file;
# any trace will do).
"$BIN" simulate --preset tiny --strategy lru --trace "$OUT/any.trace" > /dev/null 2>&1
"$BIN" replay "$OUT/any.trace" --model ext4-hdd --print-model |
    jq --argjson ns "$IO_NS" '.io_ns = $ns' > "$OUT/model.json"
echo "predicted (simulate --survey, ext4-hdd with $IO_NS ns a read on the host: disk $DISK over the surveyed filesystem, --cache 16GiB):"
"$BIN" simulate --survey "$OUT/store.survey" --strategy lru --s3-page-order key,inode \
    --model "$OUT/model.json" --cache 16GiB --json="$OUT/predicted.json" > /dev/null 2>&1
jq -r '.[] | [(.variant | sub("s3 "; "") | sub(" order"; "")), "-",
              "\(.phase1_ns / 1e8 | round / 10) s", "\(.phase2_ns / 1e8 | round / 10) s",
              "\(.s3.phase3_ns / 1e8 | round / 10) s", .model.misses, .counters.stat_calls,
              .counters.sweep_listings] | @tsv' "$OUT/predicted.json" |
    awk -F'\t' '{ printf "%-6s %4s %10s %10s %10s %14s %10s %9s\n", $1, $2, $3, $4, $5, $6, $7, $8 }'

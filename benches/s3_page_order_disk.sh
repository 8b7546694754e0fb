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
# then the mount is restarted with the disk. Per order and run: the page cache dropped, then
# `gc --dry-run --phase sweep` (the referenced set read from the indexes, nothing touched,
# nothing deleted: each run sees the same store); phase 2's time is the GC's own
# (`phase2_seconds`), the device's reads are the loop device's during the whole run.
# The prediction: `survey --s3-bucket` of the store, then `simulate --survey` with the
# filesystem's model on the same disk (its span fitted to the image) and a cache that holds
# everything (the runs have the host's free memory as their page cache).
#
#   bash benches/s3_page_order_disk.sh [SCALE] [RUNS] [DISK]   (as root; s3s-fs on the PATH)
#   defaults: the small preset at scale 2 (about 106k chunk objects), 1 run, hdd-7200;
#   IMG=8G the image's size; KEEP=1 keeps OUT (named on standard error)
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
        > "$OUT/mount.log" 2>&1 &
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
down

up "$DISK,span=$(numfmt --from=iec "$IMG")"
mount -o relatime "$LOOP" "$OUT/fs"
printf '%-6s %4s %12s %12s %14s %10s\n' order run phase2 "whole run" "device reads" "stats"
for run in $(seq "$RUNS"); do
    for order in key inode; do
        sync; echo 3 > /proc/sys/vm/drop_caches
        before=$(reads); t0=$(date +%s.%N)
        "$BIN" gc --dry-run --phase sweep --no-atime-check --s3-bucket pbs-disk \
            --s3-page-order "$order" --json="$OUT/$order.$run.json" "$STORE" > "$OUT/$order.$run.log" 2>&1
        t1=$(date +%s.%N); after=$(reads)
        jq -r --arg o "$order" --arg r "$run" --arg whole "$(echo "$t1 - $t0" | bc)" \
            --arg reads "$(( after - before ))" \
            '[$o, $r, "\(.counters.phase2_seconds * 100 | round / 100) s",
              "\($whole | tonumber * 10 | round / 10) s", $reads, .counters.stat_calls] | @tsv' \
            "$OUT/$order.$run.json" |
            awk -F'\t' '{ printf "%-6s %4s %12s %12s %14s %10s\n", $1, $2, $3, $4, $5, $6 }'
    done
done
down

echo "predicted (simulate --survey --model ext4-hdd, disk $DISK over the image, --cache 16GiB):"
"$BIN" simulate --survey "$OUT/store.survey" --strategy lru --s3-page-order key,inode --phase sweep \
    --model ext4-hdd --cache 16GiB --json="$OUT/predicted.json" > /dev/null 2>&1
jq -r '.[] | [.variant, "phase 2 \(.phase2_ns / 1e9 * 100 | round / 100) s",
             "stats \(.counters.stat_calls)", "listings \(.counters.sweep_listings)"] | @tsv' \
    "$OUT/predicted.json"

#!/bin/bash
# Phase 2 of an S3 datastore's GC in key order (PBS 4) and in inode order (`gc --s3-page-order
# inode`: each page's local markers stat'ed in inode order, after one listing of the page's
# chunk directories), side by side on one store (issue 50): the GC through a shadow mount of
# the local cache with the zfs-hdd model (`--time-scale 0`: each request's modelled cost
# recorded, nothing waits), its S3 requests through the recorder into the same trace, a dry
# run (nothing deleted, so both orders see the same store). The mount, the recorder and the
# GC on CPU 0, the S3 server (s3s-fs) on CPU 1.
#
#   bash benches/s3_page_order.sh [SCALE] [RUNS]      (as root: FUSE; s3s-fs on the PATH)
#   defaults: the small preset at scale 2 (about 106k chunks), 1 run of each order;
#   KEEP=1 keeps the traces and analyses (the directory is named on standard error)
#
# Prints, per order: phase 2's real and modelled time, its local requests (lookups, getattrs,
# listings), the lookups' median inode gap and share in the block of the one before, the
# distinct metadata blocks, and the S3 requests (pages, time waiting on the server).
set -euo pipefail
SCALE=${1:-2}
RUNS=${2:-1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${CHUNKSCOPE:-$ROOT/target/release/chunkscope}
[ -x "$BIN" ] || { echo "build first: cargo build --release (or set CHUNKSCOPE)" >&2; exit 2; }
command -v s3s-fs > /dev/null || { echo "s3s-fs not found: cargo install s3s-fs@0.14.1 --features binary --locked" >&2; exit 2; }
export PATH=$(dirname "$BIN"):$ROOT/mount-scripts:$PATH
WORK=$(mktemp -d /dev/shm/chunkscope-s3bench.XXXXXX)
BUCKETS=$(mktemp -d /var/tmp/chunkscope-s3bench.XXXXXX)
SERVER=
cleanup() {
    if [ -n "$SERVER" ]; then kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; fi
    if [ -n "${KEEP:-}" ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
    rm -rf "$BUCKETS"
}
trap cleanup EXIT
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret-key
RUST_LOG=s3s_fs=info NO_COLOR=1 taskset -c 1 s3s-fs --host 127.0.0.1 --port 0 \
    --access-key "$AWS_ACCESS_KEY_ID" --secret-key "$AWS_SECRET_ACCESS_KEY" "$BUCKETS" \
    > "$WORK/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 100); do grep -q "server is running at" "$WORK/server.log" && break; sleep 0.1; done
export AWS_ENDPOINT_URL=$(sed -n 's/.*server is running at //p' "$WORK/server.log" | head -1)
[ -n "$AWS_ENDPOINT_URL" ] || { echo "s3s-fs did not start: $(cat "$WORK/server.log")" >&2; exit 2; }

STORE=$WORK/store
start=$(date +%s)
"$BIN" gen --quiet --preset small --scale "$SCALE" --backend s3 --s3-bucket pbs-bench --out "$STORE"
echo "gen --preset small --scale $SCALE --backend s3: $(( $(date +%s) - start )) s," \
    "$(jq .referenced_chunks "$STORE.truth.json") referenced chunks," \
    "$(find "$BUCKETS/pbs-bench/.chunks" -type f | wc -l) chunk objects"

printf '%-6s %4s %10s %12s %9s %9s %9s %10s %10s %9s %7s %10s\n' order run real modelled \
    lookups getattrs listings "|dino| p50" "same blk" blocks pages "S3 wait"
for run in $(seq "$RUNS"); do
    for order in key inode; do
        trace=$WORK/$order.trace
        taskset -c 0 chunkscope-run "$STORE" "$trace" --shadow --model zfs-hdd --time-scale 0 -- \
            chunkscope s3-record --s3-bucket pbs-bench --mount '$CHUNKSCOPE_MNT' -- \
            chunkscope gc --dry-run --no-atime-check --s3-bucket pbs-bench \
            --s3-page-order "$order" --json="$WORK/$order.json" '$CHUNKSCOPE_MNT' \
            > /dev/null 2> "$WORK/$order.log"
        "$BIN" analyze --json="$WORK/$order.analysis.json" "$trace" > /dev/null 2>&1
        jq -r --arg order "$order" --arg run "$run" '
            .phases[] | select(.name | startswith("phase2")) |
            [$order, $run,
             "\(.real_ns / 1e9 * 100 | round / 100) s",
             "\(.modeled_ns / 1e9 * 10 | round / 10) s",
             ([.ops[] | select(.op == "lookup") | .count] | add // 0),
             ([.ops[] | select(.op == "getattr") | .count] | add // 0),
             ([.ops[] | select(.op == "readdir" or .op == "readdirplus") | .count] | add // 0),
             .lookups.gap_p50,
             "\(.lookups.same_block * 1000 | round / 10)%",
             .lookups.distinct_blocks,
             .s3.list_pages,
             "\(.s3.busy_ns / 1e9 * 10 | round / 10) s"] | @tsv' "$WORK/$order.analysis.json" |
            awk -F'\t' '{ printf "%-6s %4s %10s %12s %9s %9s %9s %10s %10s %9s %7s %10s\n",
                $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12 }'
    done
done

#!/bin/bash
# The survey's budgets (issue 41): its listing against the same syscalls from C
# (`find .chunks -printf '%i %f\n'`: getdents64, inode numbers from the entries), and its
# memory a chunk, on one store, runs alternating so that both see the same page cache.
#
#   [COLD=1] bash benches/survey.sh [STORE] [RUNS]
#   defaults: /dev/shm/chunkscope-survey (generated as datastore-b --scale 0.1, about a
#   million chunks, if missing) and 5 runs of each
#
# COLD=1 drops the page, dentry and inode caches before each command (as root), so that
# both read the disk: a store's first survey.
# Prints each run's seconds (find's whole run; the survey's listing step, from its JSON, and
# its whole run), the survey's peak RSS, and that of a survey of the tiny preset (2,749
# chunks: the binary and the per-directory arrays), then the medians and bytes a chunk.
set -euo pipefail
STORE=${1:-/dev/shm/chunkscope-survey}
RUNS=${2:-5}
BIN=${CHUNKSCOPE:-$(dirname "$0")/../target/release/chunkscope}
[ -x "$BIN" ] || { echo "build first: cargo build --release (or set CHUNKSCOPE)" >&2; exit 2; }
if [ ! -d "$STORE/.chunks" ]; then
    "$BIN" gen --quiet --preset datastore-b --scale 0.1 --out "$STORE"
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$BIN" gen --quiet --preset tiny --out "$WORK/tiny"
cold() { if [ "${COLD:-0}" = 1 ]; then sync; echo 3 > /proc/sys/vm/drop_caches; fi; }
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
for i in $(seq "$RUNS"); do
    cold
    /usr/bin/time -f '%e' -o "$WORK/find.time" find "$STORE/.chunks" -printf '%i %f\n' >/dev/null
    cold
    /usr/bin/time -f '%e %M' -o "$WORK/survey.time" "$BIN" survey --json="$WORK/r.json" "$STORE" >/dev/null
    listing=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['seconds']['listing'])" "$WORK/r.json")
    read -r total rss < "$WORK/survey.time"
    echo "run $i: find $(cat "$WORK/find.time") s, survey listing $(printf %.2f "$listing") s (whole survey $total s, peak RSS $rss kB)"
    cat "$WORK/find.time" >> "$WORK/find.all"
    echo "$listing" >> "$WORK/listing.all"
    echo "$rss" >> "$WORK/rss.all"
done
/usr/bin/time -f '%M' -o "$WORK/base.time" "$BIN" survey "$WORK/tiny" >/dev/null
chunks=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['chunks'])" "$WORK/r.json")
f=$(median < "$WORK/find.all"); l=$(median < "$WORK/listing.all"); r=$(median < "$WORK/rss.all")
base=$(cat "$WORK/base.time")
echo "chunks $chunks"
echo "median: find $f s, survey listing $(printf %.2f "$l") s ($(python3 -c "print(f'{$l/$f:.2f}')")x find's)"
echo "memory: peak RSS $r kB, $base kB surveying a tiny store: $(python3 -c "print(f'{($r-$base)*1024/$chunks:.1f}')") bytes a chunk"

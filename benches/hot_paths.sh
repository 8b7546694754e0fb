#!/bin/bash
# Two builds side by side on the two hot loops that were split into functions (issue 42,
# point 7): the sweep's per-chunk path (gc/sweep.rs) and the analysis's per-record path
# (analysis::Analyzer::push_sample). Each round runs both builds, one after the other,
# pinned to CPU 0 (taskset -c 0), so that both see the same machine.
#
#   bash benches/hot_paths.sh OLD_BINARY NEW_BINARY [ROUNDS]
#   e.g. git stash; cargo build --release; cp target/release/chunkscope /tmp/chunkscope-old
#        git stash pop; cargo build --release
#        bash benches/hot_paths.sh /tmp/chunkscope-old target/release/chunkscope 7
#
# Sweep: a `small` store (52,734 chunk files); each round a GC of a fresh copy (cp -a, on /dev/shm, its atimes set back after): phase 1 touches the 50,748
# referenced chunks, phase 2 lists 65,536 directories, stats every chunk (every atime three days old) and removes the
# 1,985 unreferenced ones. Its phase2_seconds (from --json) is the sweep's time.
# Analysis: `analyze --json` of a simulated naive GC's trace of the same preset (both phases).
# Prints each round's figures, then the medians.
set -euo pipefail
OLD=${1:?old binary}
NEW=${2:?new binary}
ROUNDS=${3:-7}
WORK=$(mktemp -d /dev/shm/chunkscope-hot.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
"$NEW" gen --quiet --preset small --out "$WORK/store"
"$NEW" simulate --quiet --preset small --strategy naive --phase all --trace "$WORK/naive.trace" >/dev/null
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
for r in $(seq "$ROUNDS"); do
    for b in old new; do
        bin=$OLD; [ "$b" = new ] && bin=$NEW
        rm -rf "$WORK/copy"
        cp -a "$WORK/store" "$WORK/copy"
        # After the copy: cp's reads move the source's atimes (relatime), not the copy's.
        find "$WORK/copy/.chunks" -type f -exec touch -a -d '3 days ago' {} +
        taskset -c 0 "$bin" gc --quiet --json="$WORK/gc.json" "$WORK/copy" >/dev/null
        sweep=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['counters']; print(c['phase2_seconds'], c['removed_chunks'], c['stat_calls'])" "$WORK/gc.json")
        /usr/bin/time -f '%e' -o "$WORK/analyze.time" taskset -c 0 "$bin" analyze -q --json "$WORK/naive.trace" >"$WORK/analyze.json"
        read -r s removed stats <<<"$sweep"
        echo "round $r $b: sweep $s s ($stats stats, $removed removed), analyze $(cat "$WORK/analyze.time") s"
        echo "$s" >> "$WORK/sweep.$b"
        cat "$WORK/analyze.time" >> "$WORK/analyze.$b"
    done
done
records=$(python3 -c "import json,sys; print(sum(p['records'] for p in json.load(open(sys.argv[1]))['phases']))" "$WORK/analyze.json")
for b in old new; do
    echo "$b: median sweep $(median < "$WORK/sweep.$b") s, median analyze $(median < "$WORK/analyze.$b") s ($records records)"
done

#!/bin/bash
# Calibration from task logs against the testbed (issue 48, point 5): for each testbed
# directory and each strategy run there, `calibrate` on that strategy's task log alone (from
# the base model with the testbed's disk, DIR/base-model.json: neither the cache nor the host
# time a read are given), then `simulate --survey` every strategy with the fitted model, and
# compare each phase with what the testbed measured (DIR/report.json).
#
#   bash benches/calibrate_matrix.sh TESTBED_DIR...
#   (each made by `chunkscope testbed --out DIR ...`, which keeps the logs and the survey)
#
# Prints a Markdown row per (testbed, calibrated on): the fitted cache and io_ns, the range
# of predicted/measured over the 10 phase times, how many are within 1.5x, and whether the
# phase-1 ranking agrees (ties within 10% aside, as the testbed's report).
set -euo pipefail
BIN=${CHUNKSCOPE:-$(dirname "$0")/../target/release/chunkscope}
[ -x "$BIN" ] || { echo "build first: cargo build --release (or set CHUNKSCOPE)" >&2; exit 2; }
[ $# -gt 0 ] || { echo "usage: $0 TESTBED_DIR..." >&2; exit 2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
echo "| testbed | calibrated on | fitted cache | fitted io_ns | predicted / measured | within 1.5x | ranking |"
echo "|---|---|---|---|---|---|---|"
for dir in "$@"; do
    for log in "$dir"/*.log; do
        [[ $(basename "$log") =~ -[0-9]+\.log$ ]] && continue # a repeated round's log
        on=$(basename "$log" .log)
        # On ZFS the ARC's size is pinned, as an admin reads it from arcstats' c_max (the
        # testbed's --memory): a log alone fits any of a wide range (BENCHMARKS, issue 64).
        pin=()
        if [ "$(jq -r .options.fs "$dir/report.json")" = zfs ]; then
            pin=(--cache "$(jq -r .options.memory_bytes "$dir/report.json")")
        fi
        "$BIN" -q calibrate --survey "$dir/store.survey" --model "$dir/base-model.json" \
            "${pin[@]}" --out "$WORK/fitted.json" "$log" > /dev/null
        "$BIN" -q simulate --survey "$dir/store.survey" --model "$WORK/fitted.json" --json \
            > "$WORK/sim.json"
        jq -r --arg tb "$(basename "$dir")" --arg on "$on" \
            --slurpfile sim "$WORK/sim.json" --slurpfile fit "$WORK/fitted.json" '
            (.runs | map({key: .strategy, value: [.phases[].measured_s]}) | from_entries) as $m
            | ($sim[0] | map({key: (.strategy | tostring),
                              value: [.phase1_ns / 1e9, .phase2_ns / 1e9]}) | from_entries) as $p
            | [$m | keys[] as $s | range(2) as $i | $p[$s][$i] / $m[$s][$i]] as $r
            | ($m | keys) as $names
            | [range($names | length) as $a | range($a + 1; $names | length) as $b
               | $m[$names[$a]][0] as $ma | $m[$names[$b]][0] as $mb
               | ([$ma, $mb] | max) <= 1.1 * ([$ma, $mb] | min)
                 or (($ma < $mb) == ($p[$names[$a]][0] < $p[$names[$b]][0]))] | all as $agree
            | "| \($tb) | \($on) | \($fit[0].cache_bytes / 1048576 | floor) MiB | \($fit[0].io_ns / 1000 | floor) us | \($r | min * 100 | round / 100)-\($r | max * 100 | round / 100) | \([$r[] | select(. >= 1 / 1.5 and . <= 1.5)] | length)/\($r | length) | \(if $agree then "yes" else "no" end) |"
        ' "$dir/report.json"
    done
done

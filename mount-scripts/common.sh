# Shared helpers of the chunkscope mount scripts (sourced, not run).

die() { echo "$(basename "$0"): $*" >&2; exit 2; }

# The chunkscope binary: $CHUNKSCOPE, else on PATH, else this checkout's release build.
chunkscope_bin() {
    if [ -n "${CHUNKSCOPE:-}" ]; then echo "$CHUNKSCOPE"; return; fi
    if command -v chunkscope >/dev/null 2>&1; then command -v chunkscope; return; fi
    local here; here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    if [ -x "$here/../target/release/chunkscope" ]; then echo "$here/../target/release/chunkscope"; return; fi
    die "chunkscope not found: set CHUNKSCOPE, put it on PATH, or run 'cargo build --release'"
}

# Dies unless this process holds capability BIT (root holds them all), saying WHY it is needed.
need_cap() {  # BIT NAME WHY
    local eff; eff=$(awk '/^CapEff:/ { print $2 }' /proc/self/status)
    (( (16#${eff:-0} >> $1) & 1 )) || die "needs root ($2: $3); run it with sudo"
}

is_mounted() {  # MNT (absolute)
    awk -v m="$1" '$5 == m { found = 1 } END { exit !found }' /proc/self/mountinfo
}

# What is mounted on MNT: "TYPE SOURCE" of the topmost mount there.
mount_source() {  # MNT (absolute)
    awk -v m="$1" '$5 == m { for (i = 7; $i != "-"; i++); s = $(i + 1) " " $(i + 2) } END { print s }' /proc/self/mountinfo
}

# Where chunkscope-mount keeps the pid and log of the mount on MNT.
state_prefix() {  # MNT (absolute)
    local dir="${CHUNKSCOPE_STATE:-/run/chunkscope}"
    mkdir -p "$dir" 2>/dev/null && [ -w "$dir" ] \
        || die "cannot write the state directory '$dir' (set CHUNKSCOPE_STATE to a directory you own)"
    echo "$dir/mount-$(printf '%s' "$1" | sha256sum | cut -c1-16)"
}

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

is_mounted() {  # MNT (absolute)
    awk -v m="$1" '$5 == m { found = 1 } END { exit !found }' /proc/self/mountinfo
}

# Where chunkscope-mount keeps the pid and log of the mount on MNT.
state_prefix() {  # MNT (absolute)
    local dir="${CHUNKSCOPE_STATE:-/run/chunkscope}"
    mkdir -p "$dir"
    echo "$dir/mount-$(printf '%s' "$1" | sha256sum | cut -c1-16)"
}

# shellcheck shell=bash
# Shared helpers for scripts/qemu/{prepare,run}. Sourced, not executed.

die() {
    printf 'perfpilot-qemu: error: %s\n' "$*" >&2
    exit 2
}

info() {
    printf 'perfpilot-qemu: %s\n' "$*" >&2
}

# The cache holding the downloaded packages and their extracted trees.
# PERFPILOT_QEMU_CACHE wins; otherwise /work/.cache/perfpilot-qemu on the project's
# machines (where it exists or /work is writable), else the XDG cache.
qemu_cache_dir() {
    if [[ -n "${PERFPILOT_QEMU_CACHE:-}" ]]; then
        printf '%s\n' "$PERFPILOT_QEMU_CACHE"
    elif [[ -d /work/.cache/perfpilot-qemu || (-d /work && -w /work) ]]; then
        printf '%s\n' /work/.cache/perfpilot-qemu
    else
        printf '%s\n' "${XDG_CACHE_HOME:-$HOME/.cache}/perfpilot-qemu"
    fi
}

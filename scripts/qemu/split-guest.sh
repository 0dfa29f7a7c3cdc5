#!/bin/sh
# Runs inside the QEMU guest (busybox sh), started by scripts/qemu/split. Needs /bin/perfpilot
# and /bin/sharedcache.
#
# Huge pages that are split back: with debugfs mounted, perfpilot's large-pages trials are
# switchback trials (collapse, split, collapse, ...), and a reverted action really reverts:
#   1. debugfs mounted; the daemon starts (raising shmem_enabled to advise) and says that
#      huge pages are split back here;
#   2. two sharedcache instances: a private anonymous heap and a System V segment (a shared
#      buffer pool), each serving its operation counter on /metrics (the Prometheus preset);
#      the second runs under another name (comm), or each would be the other's concurrent
#      control and no trial would be a switchback;
#   3. each gets a large-pages trial designed as a switchback; its memory is seen in huge
#      pages (AnonHugePages, ShmemPmdMapped) while the trial runs;
#   4. the daemon stops (revert_on_stop): both actions are undone by splitting, and both
#      processes' huge pages fall to 5 % of what they held or less.
set -eu
fail() { echo "SPLIT FAIL: $*"; exit 1; }
mount -t debugfs none /sys/kernel/debug || fail "cannot mount debugfs"
[ -e /sys/kernel/debug/split_huge_pages ] || fail "this kernel has no split_huge_pages"

# huge PID FIELD: kB of FIELD (AnonHugePages, ShmemPmdMapped) in /proc/PID/smaps_rollup.
huge() { awk -v f="$2:" '$1 == f { print $2; exit }' "/proc/$1/smaps_rollup"; }

cat >/tmp/perfpilot.toml <<CFG
only_matched = true

[tunables]
interval_s = 1
min_age_s = 0
min_cpu_cores = 0.05
min_memory_mib = 16
windows = 3
max_windows = 6
cache_affinity = false
memory_affinity = false
read_ahead = false
rest_change_max = 0
# TCG emulation makes every scan slow: no CPU budget in this guest.
cpu_budget_pct = 100

[[workload]]
match = { comm = "sharedcache" }

[[workload]]
match = { comm = "sharedcache-shm" }
CFG
/bin/perfpilot daemon --config /tmp/perfpilot.toml --state-dir /tmp/state --for 600s >/tmp/daemon.log 2>&1 &
daemon=$!
i=0
until [ -f /tmp/state/status.json ]; do
    i=$((i + 1)); [ $i -lt 600 ] || fail "the daemon did not start: $(cat /tmp/daemon.log)"
    sleep 0.1
done
grep -q "not split back here" /tmp/daemon.log && fail "the daemon says huge pages are not split back: $(grep 'split' /tmp/daemon.log)"
echo "shmem_enabled: $(cat /sys/kernel/mm/transparent_hugepage/shmem_enabled)"

start() { # start BIN MODE OUT: a 48 MiB table, one lookup thread
    "$1" --mode "$2" --table-mib 48 --threads 1 --listen 127.0.0.1:0 >"$3" 2>&1 &
    echo $!
}
ln -sf /bin/sharedcache /tmp/sharedcache-shm
anon=$(start /bin/sharedcache private /tmp/anon.out)
shm=$(start /tmp/sharedcache-shm sysv /tmp/shm.out)
i=0
until grep -q ready /tmp/anon.out && grep -q ready /tmp/shm.out; do
    i=$((i + 1)); [ $i -lt 1200 ] || fail "sharedcache did not start: $(cat /tmp/anon.out /tmp/shm.out)"
    sleep 0.1
done
echo "sharedcache: private heap pid $anon, System V segment pid $shm"

# While the trials run: the most huge pages each held, until both actions are decided. A
# period on lasts two 1-s scans, and a `status` call under TCG can take longer than that, so the
# pages are sampled by a loop of their own, five times a second.
echo 0 >/tmp/max_anon
echo 0 >/tmp/max_shm
(
    ma=0 ms=0
    while :; do
        a=$(huge "$anon" AnonHugePages) s=$(huge "$shm" ShmemPmdMapped)
        [ "${a:-0}" -gt "$ma" ] && ma=$a && echo "$ma" >/tmp/max_anon
        [ "${s:-0}" -gt "$ms" ] && ms=$s && echo "$ms" >/tmp/max_shm
        sleep 0.2
    done
) &
sampler=$!
i=0
while :; do
    decided=$(/bin/perfpilot status --json --state-dir /tmp/state | grep -c '"decision"' || true)
    [ "$decided" -ge 2 ] && break
    # A daemon that ended (its --for, or a failure) has reverted what it held: stop looking.
    kill -0 "$daemon" 2>/dev/null || break
    i=$((i + 1)); [ $i -lt 200 ] || break
    sleep 2
done
kill "$sampler" 2>/dev/null || true
wait "$sampler" 2>/dev/null || true
max_anon=$(cat /tmp/max_anon) max_shm=$(cat /tmp/max_shm)
/bin/perfpilot status --state-dir /tmp/state | sed -n '/trial:\|ID STRATEGY/,$p'
echo "most huge pages while measured: private heap $max_anon kB, System V segment $max_shm kB"
kill "$daemon" 2>/dev/null || true
wait "$daemon" || true
sed 's/\x1b\[[0-9;]*m//g' /tmp/daemon.log | grep -E "trial starts|periods planned|kept|reverted|split|stopping" || true
a=$(huge "$anon" AnonHugePages) s=$(huge "$shm" ShmemPmdMapped)
echo "after the daemon stopped: private heap $a kB, System V segment $s kB"
grep -q '"design": "switchback"' /tmp/state/status.json 2>/dev/null || /bin/perfpilot status --json --state-dir /tmp/state | grep -q '"design": "switchback"' || fail "no switchback trial"
[ "$max_anon" -ge 16384 ] || fail "the private heap was never collapsed (at most $max_anon kB)"
[ "$max_shm" -ge 16384 ] || fail "the System V segment was never collapsed (at most $max_shm kB)"
[ $((a * 100)) -le $((max_anon * 5)) ] || fail "the private heap still holds $a kB of $max_anon kB in huge pages"
[ $((s * 100)) -le $((max_shm * 5)) ] || fail "the System V segment still holds $s kB of $max_shm kB in huge pages"
kill "$anon" "$shm" 2>/dev/null || true
echo "SPLIT OK: collapsed to $max_anon kB (private) and $max_shm kB (shared), split back to $a kB and $s kB"

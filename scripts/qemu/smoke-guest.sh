#!/bin/sh
# Runs inside the guest (busybox sh), started by scripts/qemu/smoke. Needs /bin/perfpilot.
# Prints the topology perfpilot sees, then places a `perfpilot bench load --touch-mib 64`
# process's pages on node 0 (first touch while pinned to a CPU of node 0), moves them to
# node 1 with move_pages(2) (/bin/move-pages-check, tests/qemu/move-pages-check, if present),
# then back to node 0 by changing its cgroup v2 cpuset.mems (the kernel migrates the pages),
# reading /proc/PID/numa_maps each time.
set -eu
fail() { echo "SMOKE FAIL: $*"; exit 1; }

# node_pages PID: "N0=<pages> N1=<pages>" summed over all mappings in numa_maps.
node_pages() {
    awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^N[0-9]+=/) { split($i, kv, "="); n[kv[1]] += kv[2] } }
         END { printf "N0=%d N1=%d\n", n["N0"], n["N1"] }' "/proc/$1/numa_maps"
}

echo "== perfpilot topology"
/bin/perfpilot topology
/bin/perfpilot topology | head -n1 | grep -q '^2 nodes' || fail "perfpilot topology does not report 2 nodes"

echo "== THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"

cpu0=$(cut -d, -f1 /sys/devices/system/node/node0/cpulist | cut -d- -f1)
echo "== bench load --touch-mib 64 pinned to CPU $cpu0 (node 0)"
mkfifo /tmp/load.in
taskset -c "$cpu0" /bin/perfpilot bench load --touch-mib 64 </tmp/load.in >/tmp/load.out 2>&1 &
pid=$!
exec 3>/tmp/load.in # hold the FIFO open: bench load runs until its stdin closes
i=0
until grep -q ready /tmp/load.out; do
    i=$((i + 1))
    [ $i -lt 600 ] || fail "bench load did not print ready: $(cat /tmp/load.out)"
    sleep 0.1
done
before=$(node_pages "$pid")
echo "numa_maps after first touch on node 0: $before"

if [ -x /bin/move-pages-check ]; then
    echo "== move_pages(2) of bench load's anonymous pages to node 1"
    /bin/move-pages-check "$pid" 1 || fail "move-pages-check failed"
    moved=$(node_pages "$pid")
    echo "numa_maps after move_pages to node 1: $moved"
    grep 'anon=1638[0-9]' "/proc/$pid/numa_maps" || true
    target=0
else
    echo "(no /bin/move-pages-check: skipping the move_pages step)"
    moved=$before
    target=1
fi

echo "== cgroup v2 cpuset.mems -> $target (the kernel migrates the pages)"
echo +cpuset >/sys/fs/cgroup/cgroup.subtree_control
mkdir /sys/fs/cgroup/smoke
echo 0-1 >/sys/fs/cgroup/smoke/cpuset.mems
echo "$pid" >/sys/fs/cgroup/smoke/cgroup.procs
echo "$target" >/sys/fs/cgroup/smoke/cpuset.mems
after=$(node_pages "$pid")
echo "numa_maps after cpuset.mems=$target:      $after"
grep 'anon=1638[0-9]' "/proc/$pid/numa_maps" || true

exec 3>&- # close the FIFO: bench load exits
wait "$pid" || fail "bench load exited with $?"

# pages NODE COUNTS: the N<NODE>= figure of "N0=a N1=b".
pages() { echo "$2" | tr ' ' '\n' | sed -n "s/^N$1=//p"; }
[ "$(pages 0 "$before")" -ge 16384 ] || fail "expected >= 16384 pages on node 0 after first touch, got $before"
[ "$(pages 1 "$moved")" -ge 16384 ] || fail "expected >= 16384 pages on node 1 after move_pages, got $moved"
[ "$(pages "$target" "$after")" -ge 16384 ] || fail "expected >= 16384 pages on node $target after cpuset.mems=$target, got $after"
echo "SMOKE OK"

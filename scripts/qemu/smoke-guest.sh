#!/bin/sh
# Runs inside the two-node guest (busybox sh), started by scripts/qemu/smoke. Needs /bin/perfpilot.
#
# The optimizer's two-node path, end to end:
#   1. `perfpilot topology` sees 2 nodes;
#   2. a 3-thread `perfpilot bench load` first-touches 64 MiB while pinned to node 1's CPU,
#      then is unpinned (all CPUs: not manual tuning); node 1 is kept busy by a pinned loop;
#   3. `perfpilot daemon` (affinity at node level, allow_unverified: this guest has no signal)
#      compacts the workload onto the least-loaded node, node 0 (cache affinity), then moves
#      its private pages there with move_pages (memory affinity, up to 70 %);
#   4. checked through /proc/PID/task/*/status and /proc/PID/numa_maps.
set -eu
fail() { echo "SMOKE FAIL: $*"; exit 1; }

# node_pages PID NODE: pages of anonymous mappings on NODE, from numa_maps.
node_pages() {
    awk -v n="N$2" '/anon=/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == n) s += kv[2] } } END { print s + 0 }' "/proc/$1/numa_maps"
}

echo "== perfpilot topology"
/bin/perfpilot topology
/bin/perfpilot topology | head -n1 | grep -q '^2 nodes' || fail "perfpilot topology does not report 2 nodes"
echo "== THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"

cpu0=$(cut -d, -f1 /sys/devices/system/node/node0/cpulist | cut -d- -f1)
cpu1=$(cut -d, -f1 /sys/devices/system/node/node1/cpulist | cut -d- -f1)
all=$(cat /sys/devices/system/cpu/online)

taskset -c "$cpu1" sh -c 'while :; do :; done' &
hog=$!

mkfifo /tmp/load.in
taskset -c "$cpu1" /bin/perfpilot bench load --threads 3 --touch-mib 64 --tag twonode </tmp/load.in >/tmp/load.out 2>&1 &
pid=$!
exec 3>/tmp/load.in # hold the FIFO open: bench load runs until its stdin closes
i=0
until grep -q ready /tmp/load.out; do
    i=$((i + 1))
    [ $i -lt 600 ] || fail "bench load did not print ready: $(cat /tmp/load.out)"
    sleep 0.1
done
taskset -a -p -c "$all" "$pid" >/dev/null
n0=$(node_pages "$pid" 0)
n1=$(node_pages "$pid" 1)
echo "before: threads on $(grep -h Cpus_allowed_list /proc/"$pid"/task/*/status | awk '{print $2}' | sort -u | tr '\n' ' '); anonymous pages N0=$n0 N1=$n1"
[ "$n1" -gt "$n0" ] || fail "the workload's memory did not start on node 1"

cat >/tmp/perfpilot.toml <<CFG
only_matched = true

[tunables]
interval_s = 1
min_age_s = 0
min_cpu_cores = 0
min_memory_mib = 0
affinity_level = "node"
allow_unverified = true
large_pages = false
read_ahead = false
migrate_mb_per_s = 1000
revert_on_stop = false
# TCG emulation makes every scan slow: no CPU budget in this guest.
cpu_budget_pct = 100

[[workload]]
match = { cmdline = "--tag twonode" }
CFG
echo "== perfpilot daemon (20 s)"
/bin/perfpilot daemon --config /tmp/perfpilot.toml --state-dir /tmp/state --for 20s 2>&1 | sed 's/\x1b\[[0-9;]*m//g' | grep -E "kept|trial|applying|manual|WARN|ERROR" || true
/bin/perfpilot status --state-dir /tmp/state | sed -n '/ID STRATEGY/,$p'

masks=$(grep -h Cpus_allowed_list /proc/"$pid"/task/*/status | awk '{print $2}' | sort -u | tr '\n' ' ')
n0=$(node_pages "$pid" 0)
n1=$(node_pages "$pid" 1)
echo "after: threads on $masks; anonymous pages N0=$n0 N1=$n1"
kill "$hog" 2>/dev/null || true
[ "$masks" = "$cpu0 " ] || fail "cache affinity did not compact the workload onto node 0 (cpu $cpu0): $masks"
total=$((n0 + n1))
[ $((n0 * 100)) -ge $((total * 60)) ] || fail "memory affinity moved too little to node 0: N0=$n0 of $total"
echo "SMOKE OK: compacted onto node 0 and $((n0 * 100 / total)) % of its anonymous pages are on node 0"

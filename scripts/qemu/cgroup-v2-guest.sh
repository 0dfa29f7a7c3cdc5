#!/bin/sh
# Runs inside the QEMU guest (busybox sh, cgroup v2 only at /sys/fs/cgroup), started by
# scripts/qemu/cgroup-v2. Needs /bin/perfpilot, /bin/scoring, /bin/sharedcache, /models and
# /capacity.toml. What a cgroup-v2 machine must do with perfpilot:
#   1. `perfpilot capacity` deploys a tier in a CPU group with cpu.max (a quota of half a core),
#      sweeps it, fits the model and checks the held-out point: its report is written;
#   2. the daemon, with strategies at their defaults, promotes sharedcache's table to huge
#      pages inside a v2 cpuset group holding CPU 1 (kept, or ended with its pages in place when
#      the verdict finds no clear effect: TCG's timing is noisy) and leaves its affinity as the
#      cpuset made it; status shows the group and the cpuset.
set -eu
fail() { echo "CGROUP-V2 FAIL: $*"; exit 1; }

echo "== layout: $(cat /proc/self/mountinfo | awk '$9 == "cgroup2" { print $5 }') controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
/bin/perfpilot topology | head -n 4

echo "== perfpilot capacity on cgroup v2"
cd /tmp
/bin/perfpilot capacity /capacity.toml --out /tmp/cap 2>&1 | tail -n 25
[ -s /tmp/cap/validation.md ] || fail "no validation.md"
[ -s /tmp/cap/report.html ] || fail "no report.html"
grep -q '"quota": 0.5' /tmp/cap/run.json || fail "run.json does not show the app tier's quota"
ls /sys/fs/cgroup | grep -q '^perfpilot-' && fail "a CPU group was left behind: $(ls /sys/fs/cgroup | grep perfpilot-)"
echo "root subtree_control after the run: '$(cat /sys/fs/cgroup/cgroup.subtree_control)'"
sed -n '1,40p' /tmp/cap/validation.md

echo "== the daemon on sharedcache in a v2 cpuset group {1}"
echo +cpuset >/sys/fs/cgroup/cgroup.subtree_control
mkdir /sys/fs/cgroup/box
echo 1 >/sys/fs/cgroup/box/cpuset.cpus
echo 0 >/sys/fs/cgroup/box/cpuset.mems
sh -c 'echo $$ > /sys/fs/cgroup/box/cgroup.procs && exec /bin/sharedcache --table-mib 96 --threads 2 --listen 127.0.0.1:0' >/tmp/sc.out 2>&1 &
sc=$!
i=0
until grep -q '^ready' /tmp/sc.out; do
    i=$((i + 1))
    [ $i -lt 1200 ] || fail "sharedcache did not start: $(cat /tmp/sc.out)"
    sleep 0.1
done
echo "sharedcache pid $sc: threads on $(grep -h Cpus_allowed_list /proc/$sc/task/*/status | awk '{print $2}' | sort -u | tr '\n' ' ')cgroup $(cat /proc/$sc/cgroup)"
cat >/tmp/perfpilot.toml <<CFG
only_matched = true
read_ahead_devices = []
[[workload]]
match = { comm = "sharedcache" }
[tunables]
interval_s = 2
min_age_s = 4
min_cpu_cores = 0.1
min_memory_mib = 16
windows = 4
max_windows = 4
rest_change_max = 0
min_effect = 0.005
# TCG emulation makes every scan slow: no CPU budget in this guest.
cpu_budget_pct = 100
CFG
/bin/perfpilot daemon --config /tmp/perfpilot.toml --state-dir /tmp/state --for 150s 2>&1 | sed 's/\x1b\[[0-9;]*m//g' | grep -E "kept|trial|applying|ended|reverted|WARN|ERROR" | tail -n 12 || true
/bin/perfpilot status --state-dir /tmp/state | tee /tmp/status.txt
masks=$(grep -h Cpus_allowed_list /proc/"$sc"/task/*/status | awk '{print $2}' | sort -u | tr '\n' ' ')
kill "$sc" 2>/dev/null || true
[ "$masks" = "1 " ] || fail "sharedcache's affinity changed: $masks"
grep -q "cgroup /box" /tmp/status.txt || fail "status does not show the cgroup"
grep -q "cpuset 1" /tmp/status.txt || fail "status does not show the cpuset"
# Kept, or ended with its huge pages in place (a verdict without a clear effect: TCG is noisy).
grep -Eq "^ +[0-9]+ large_pages +sharedcache +(kept|ended)" /tmp/status.txt || fail "no huge pages were kept on sharedcache"
if grep -Eq "^ +[0-9]+ (cache|memory)_affinity " /tmp/status.txt; then
    fail "an affinity action was taken"
fi
echo "CGROUP-V2 OK: capacity report written with a cpu.max group; huge pages kept on sharedcache in cpuset {1} ($(grep -Eo 'large_pages +sharedcache +[a-z]+' /tmp/status.txt | awk '{print $3}')), its mask left at $masks"

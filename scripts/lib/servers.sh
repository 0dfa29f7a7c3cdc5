# Sourced by scripts/record-trace and scripts/live-verdict: starts a throw-away server of KIND
# under load, in $work (a directory the caller made and removes), on $port. Sets:
#   comm     the server's process name (signal-trace --comm)
#   counter  an array: a command that prints the server's work counter
#   note     one line that says what runs
# and appends to the caller's arrays pids (processes to kill) and stop (commands to eval) at
# cleanup. $1 is how long the load runs, in seconds.
#
# postgres: PostgreSQL 15, scale $PG_SCALE (100), shared_buffers $PG_SHARED_BUFFERS (2GB),
#   huge_pages off, prewarmed, `pgbench -S -c $PG_CLIENTS -j 2` (4: the load of
#   `scripts/demo --postgres`).
# redis: 3,000,000 keys of 1,000 bytes, `redis-benchmark -t get -c 8 -P 16 -r 3000000`.
# jvm: workloads/jvmcache (a $JVM_TABLE_MIB (2048) MiB table, heap 1 GiB more, 4 threads) under
#   `wrk -t 2 -c 16` over random keys; its counter is jvmcache_requests_total from /metrics.
start_server() {
  local kind=$1 load_s=$2
  case $kind in
    postgres)
      local pgbin scale=${PG_SCALE:-100} buffers=${PG_SHARED_BUFFERS:-2GB} clients=${PG_CLIENTS:-4}
      pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
      mkdir -p "$work/pg" && chown postgres:postgres "$work/pg"
      runuser -u postgres -- "$pgbin/initdb" -D "$work/pg/data" -U postgres --auth-local=peer --no-sync >"$work/initdb.log" 2>&1
      runuser -u postgres -- "$pgbin/pg_ctl" -D "$work/pg/data" -l "$work/pg/server.log" -w -o \
        "-p $port -k $work/pg -c listen_addresses='' -c shared_buffers=$buffers -c huge_pages=off -c fsync=off -c synchronous_commit=off -c max_connections=20" \
        start >/dev/null
      stop+=("runuser -u postgres -- $pgbin/pg_ctl -D $work/pg/data -m fast -w stop")
      runuser -u postgres -- "$pgbin/pgbench" -h "$work/pg" -p "$port" -i -q -s "$scale" postgres >"$work/init.log" 2>&1
      runuser -u postgres -- "$pgbin/psql" -h "$work/pg" -p "$port" -q -X -d postgres -c "CREATE EXTENSION IF NOT EXISTS pg_prewarm" \
        -c "SELECT pg_prewarm('pgbench_accounts'), pg_prewarm('pgbench_accounts_pkey')" >/dev/null
      runuser -u postgres -- "$pgbin/pgbench" -h "$work/pg" -p "$port" -S -c "$clients" -j 2 -n -T "$load_s" postgres >"$work/bench.out" 2>&1 &
      pids+=($!)
      comm=postgres
      counter=(runuser -u postgres -- psql -h "$work/pg" -p "$port" -U postgres -Atc
        'select sum(xact_commit + xact_rollback) from pg_stat_database' postgres)
      note="PostgreSQL 15, pgbench -S -c $clients -j 2, scale $scale, shared_buffers $buffers, huge_pages off, prewarmed"
      ;;
    redis)
      redis-server --port "$port" --save '' --appendonly no --daemonize no >"$work/redis.log" 2>&1 &
      pids+=($!)
      for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
      redis-benchmark -p "$port" -t set -n 3000000 -r 3000000 -d 1000 -P 64 -q >/dev/null
      timeout "$load_s" redis-benchmark -p "$port" -t get -c 8 -P 16 -r 3000000 -n 2000000000 -q >/dev/null 2>&1 &
      pids+=($!)
      comm=redis-server
      counter=(sh -c "redis-cli -p $port info stats | awk -F: '/total_commands_processed/{print \$2+0}'")
      note="Redis ($(redis-server --version | grep -o 'v=[0-9.]*')), 3,000,000 keys of 1,000 bytes, redis-benchmark -t get -c 8 -P 16 -r 3000000"
      ;;
    jvm)
      mkdir -p "$work/jvm/classes"
      javac -d "$work/jvm/classes" workloads/jvmcache/Jvmcache.java
      chmod -R a+rX "$work/jvm"
      local table=${JVM_TABLE_MIB:-2048}
      runuser -u nobody -- java -Xmx$((table + 1024))m -Xms$((table + 1024))m -cp "$work/jvm/classes" Jvmcache \
        --port "$port" --table-mib "$table" --threads 4 >"$work/jvm/server.log" 2>&1 &
      pids+=($!)
      for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/metrics" >/dev/null && break; sleep 0.5; done
      local keys=$((table * 1024 * 1024 / 8 - 1))
      printf 'math.randomseed(1)\nrequest = function()\n  return wrk.format(nil, "/get?k=" .. math.random(0, %d))\nend\n' "$keys" >"$work/keys.lua"
      wrk -t 2 -c 16 -d "${load_s}s" -s "$work/keys.lua" "http://127.0.0.1:$port/" >"$work/wrk.out" 2>&1 &
      pids+=($!)
      comm=java
      counter=(sh -c "curl -sf http://127.0.0.1:$port/metrics | awk '/^jvmcache_requests_total/{print \$2+0}'")
      note="workloads/jvmcache, a $table MiB table, heap $((table + 1024)) MiB, 4 threads, wrk -t 2 -c 16 over random keys"
      ;;
    *)
      echo "unknown server kind $kind (postgres, redis or jvm)" >&2
      return 2
      ;;
  esac
}

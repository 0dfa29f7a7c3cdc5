//! The per-request database lookup (`--db`): a range aggregate over a PostgreSQL table, so the
//! service is the middle tier of a three-tier deployment (proxy → scoring → database) whose
//! database does measurable work per request. The table is created and filled on first start.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio_postgres::{Client, NoTls, Statement};

/// Rows in the lookup table.
pub const TABLE_ROWS: i32 = 100_000;

/// A few connections to PostgreSQL, used round robin (each pipelines its queries).
pub struct Lookup {
    clients: Vec<(Client, Statement)>,
    next: AtomicUsize,
    rows: i32,
}

impl Lookup {
    /// Connects `connections` times to `conninfo` (libpq key=value form), creates and fills
    /// the table `perfpilot_lookup` when it is missing, and prepares the lookup of `rows`
    /// consecutive keys.
    pub async fn connect(conninfo: &str, connections: usize, rows: i32) -> Result<Lookup, String> {
        if !(1..TABLE_ROWS).contains(&rows) {
            return Err(format!(
                "--db-rows {rows}: it must be between 1 and {}",
                TABLE_ROWS - 1
            ));
        }
        let mut clients = Vec::with_capacity(connections.max(1));
        for i in 0..connections.max(1) {
            let (client, conn) = tokio_postgres::connect(conninfo, NoTls)
                .await
                .map_err(|e| format!("cannot connect to PostgreSQL ({conninfo}): {e}"))?;
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    eprintln!("scoring: PostgreSQL connection closed: {e}");
                }
            });
            if i == 0 {
                // Several instances may start at once: one fills the table, the others wait.
                client
                    .batch_execute(&format!(
                        "SELECT pg_advisory_lock(7310);
                         CREATE TABLE IF NOT EXISTS perfpilot_lookup (k integer PRIMARY KEY, v double precision NOT NULL);
                         INSERT INTO perfpilot_lookup SELECT g, (g * 7919 % 1000) / 10.0 FROM generate_series(1, {TABLE_ROWS}) g ON CONFLICT DO NOTHING;
                         ANALYZE perfpilot_lookup;
                         SELECT pg_advisory_unlock(7310);"
                    ))
                    .await
                    .map_err(|e| format!("cannot create the lookup table: {e}"))?;
            }
            let stmt = client
                .prepare(
                    "SELECT count(*), coalesce(sum(v), 0) FROM perfpilot_lookup WHERE k >= $1 AND k < $1 + $2",
                )
                .await
                .map_err(|e| format!("cannot prepare the lookup: {e}"))?;
            clients.push((client, stmt));
        }
        Ok(Lookup {
            clients,
            next: AtomicUsize::new(0),
            rows,
        })
    }

    /// Sums the `rows` values from key `key` on (wrapped into the table): (rows, sum).
    pub async fn query(&self, key: i32) -> Result<(i64, f64), String> {
        let start = 1 + key.rem_euclid(TABLE_ROWS - self.rows);
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.clients.len();
        let (client, stmt) = &self.clients[i];
        let row = client
            .query_one(stmt, &[&start, &self.rows])
            .await
            .map_err(|e| format!("lookup failed: {e}"))?;
        Ok((row.get(0), row.get(1)))
    }
}

//! The order of the cells: in each round every cell of every server runs once, and the order
//! of a server's cells changes from round to round, so a drift of the machine (page cache,
//! fragmentation, a neighbour's load) falls on every cell alike.
//!
//! Within each block of as many rounds as there are cells, the orders are the rotations of one
//! shuffled order (a Latin square: each cell takes each position once); the next block starts
//! from a new shuffle. Shuffles come from perfpilot-stats' seeded [`Rng`], so a seed gives the
//! same plan again (which `--resume` relies on).

use perfpilot_stats::Rng;

use crate::options::{CellName, ServerName};

/// One cell run of the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// Round, from 1.
    pub round: u32,
    /// The server.
    pub server: ServerName,
    /// The configuration.
    pub cell: CellName,
}

/// The order of `cells` in each of `rounds` rounds (seeded).
pub fn orders(cells: &[CellName], rounds: u32, seed: u64) -> Vec<Vec<CellName>> {
    let n = cells.len();
    let mut out: Vec<Vec<CellName>> = Vec::new();
    if n == 0 {
        return vec![Vec::new(); rounds as usize];
    }
    let mut base = cells.to_vec();
    for r in 0..rounds as usize {
        if r % n == 0 {
            base = cells.to_vec();
            Rng::new(seed ^ (r / n) as u64).shuffle(&mut base);
        }
        let mut order = base.clone();
        order.rotate_left(r % n);
        // A new block's shuffle can repeat the order just run: shift it once more.
        if n > 1 && out.last() == Some(&order) {
            order.rotate_left(1);
        }
        out.push(order);
    }
    out
}

/// The whole plan: rounds outermost, then servers in the given order, then that round's order
/// of the cells that apply to the server.
pub fn plan(servers: &[ServerName], cells: &[CellName], rounds: u32, seed: u64) -> Vec<Step> {
    let orders = orders(cells, rounds, seed);
    let mut steps = Vec::new();
    for (r, order) in orders.iter().enumerate() {
        for &server in servers {
            for &cell in order.iter().filter(|c| c.applies_to(server)) {
                steps.push(Step {
                    round: r as u32 + 1,
                    server,
                    cell,
                });
            }
        }
    }
    steps
}

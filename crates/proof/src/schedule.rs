//! The order of the cells: in each round every cell of every server runs once, and the order
//! of a server's cells changes from round to round, so a drift of the machine (page cache,
//! fragmentation, a neighbour's load) falls on every cell alike.
//!
//! The orders are `perfpilot_lab::schedule::latin_square`'s: within each block of as many
//! rounds as there are cells, the rotations of one seeded shuffle (each cell takes each
//! position once), so a seed gives the same plan again (which `--resume` relies on).

use perfpilot_lab::schedule::latin_square;

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

/// The whole plan: rounds outermost, then servers in the given order, then that round's order
/// of the cells that apply to the server.
pub fn plan(servers: &[ServerName], cells: &[CellName], rounds: u32, seed: u64) -> Vec<Step> {
    let orders = latin_square(cells, rounds, seed);
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

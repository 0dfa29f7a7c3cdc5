//! The orders in which an experiment's rounds run what they compare, so that a drift of the
//! machine (page cache, fragmentation, a neighbour's load) falls on every item alike: the
//! same order forwards and backwards in turn (`capacity`'s load points), the rotations of a
//! seeded shuffle (a Latin square: the proof harness's cells), or a seeded shuffle per round
//! (`study`'s race and confirmation rounds). Shuffles come from `perfpilot-stats`' seeded
//! [`Rng`], so a seed gives the same schedule again (which resuming relies on).

use perfpilot_stats::Rng;

/// The order in which round `round` (from 0) runs `plan`: as planned in even rounds, reversed
/// in odd ones, so two rounds put every item at the same mean time.
pub fn alternating<T: Clone>(plan: &[T], round: u32) -> Vec<T> {
    let mut v = plan.to_vec();
    if round % 2 == 1 {
        v.reverse();
    }
    v
}

/// `items` in an order seeded by `seed`.
pub fn shuffled<T: Clone>(items: &[T], seed: u64) -> Vec<T> {
    let mut v = items.to_vec();
    Rng::new(seed).shuffle(&mut v);
    v
}

/// The order of `items` in each of `rounds` rounds: within each block of as many rounds as
/// there are items, the rotations of one shuffled order (each item takes each position once);
/// the next block starts from a new shuffle (`seed` with the block's number), and never with
/// the order just run.
pub fn latin_square<T: Clone + PartialEq>(items: &[T], rounds: u32, seed: u64) -> Vec<Vec<T>> {
    let n = items.len();
    let mut out: Vec<Vec<T>> = Vec::new();
    if n == 0 {
        return vec![Vec::new(); rounds as usize];
    }
    let mut base = items.to_vec();
    for r in 0..rounds as usize {
        if r % n == 0 {
            base = shuffled(items, seed ^ (r / n) as u64);
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

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn odd_rounds_run_backwards_so_two_rounds_put_every_item_at_the_same_mean_time() {
        let plan = [1, 2, 3, 4];
        assert_eq!(alternating(&plan, 0), vec![1, 2, 3, 4]);
        assert_eq!(alternating(&plan, 1), vec![4, 3, 2, 1]);
        let both: Vec<i32> = alternating(&plan, 0)
            .into_iter()
            .chain(alternating(&plan, 1))
            .collect();
        let mean_slot = |v: i32| {
            both.iter()
                .enumerate()
                .filter(|(_, x)| **x == v)
                .map(|(i, _)| i)
                .sum::<usize>()
        };
        assert!(plan.iter().all(|&v| mean_slot(v) == mean_slot(1)));
    }

    #[test]
    fn each_round_of_a_latin_square_runs_every_item_once_and_the_orders_differ() {
        let items: Vec<u32> = (0..6).collect();
        let os = latin_square(&items, 14, 42);
        assert_eq!(os.len(), 14);
        for o in &os {
            let set: HashSet<_> = o.iter().collect();
            assert_eq!(set.len(), items.len(), "every item once: {o:?}");
        }
        for w in os.windows(2) {
            assert_ne!(w[0], w[1], "consecutive rounds share an order");
        }
        // In a block of as many rounds as items, each item takes each position once.
        for block in [&os[..6], &os[6..12]] {
            for pos in 0..items.len() {
                let at: HashSet<_> = block.iter().map(|o| o[pos]).collect();
                assert_eq!(at.len(), items.len(), "position {pos} repeats an item");
            }
        }
        assert_eq!(
            latin_square(&items, 14, 42),
            os,
            "a seed gives the same plan"
        );
        assert_ne!(latin_square(&items, 14, 43), os);
        assert_eq!(latin_square::<u32>(&[], 2, 1), vec![Vec::<u32>::new(); 2]);
    }

    #[test]
    fn a_seeded_shuffle_is_the_same_again_and_keeps_every_item() {
        let items: Vec<u32> = (0..20).collect();
        let a = shuffled(&items, 7);
        assert_eq!(a, shuffled(&items, 7));
        assert_ne!(a, items);
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, items);
    }
}

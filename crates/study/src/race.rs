//! The racing rules: after each round, which configurations leave the race and why — far
//! behind the leader (from round 3), significantly worse than the best (F-Race: Friedman with
//! Conover's comparisons, Wilcoxon when two are left), equivalent to or tied with the leader,
//! unlikely to be the best (a bootstrap of the rounds), and settled once choosing the leader is
//! expected to cost less than `run.stop_loss`.

use perfpilot_store::TrialRecord;
use serde::{Deserialize, Serialize};

use crate::scores::{best_mean, blocks, log_advantage, paired_values};
use crate::spec::{FAR_BEHIND_MIN_ROUNDS, Goal, Study};
use crate::stats::{self, Alternative};

/// Why a configuration left the race.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Left {
    /// Significantly worse than the best.
    #[default]
    Worse,
    /// Failed twice.
    Failed,
    /// Practically equivalent to the leader (within `objective.min_effect`): running it
    /// further could not change the choice by more than that.
    Equivalent,
    /// Tied with the leader beyond what the rounds left could resolve (conditional power
    /// below `run.futility`).
    Tied,
    /// Best in fewer than `run.min_chance` of the bootstrap resamples of the rounds so far:
    /// it practically cannot win, though no test has yet shown it worse.
    Unlikely,
    /// Significantly more than `run.far_behind` behind the leader, from round 3 on.
    #[serde(rename = "far_behind", alias = "farbehind")]
    FarBehind,
    /// Still racing when the race ended because choosing the leader was expected to cost
    /// less than `run.stop_loss`: not shown worse, and no longer worth the rounds.
    Settled,
    /// Left at the end of an iterated search's race but not among the elites it keeps (the
    /// best means), so not raced again.
    #[serde(rename = "not_elite")]
    NotElite,
}

/// A configuration that left the race before the last round.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Elimination {
    /// The configuration's key.
    pub config: String,
    /// The last round it ran in.
    pub round: usize,
    /// Why: `worse than <best> (…)`, `failed twice, …` or `equivalent to <leader> …`.
    pub reason: String,
    /// The p-value of the comparison that took it out (only for [`Left::Worse`]).
    pub p_value: Option<f64>,
    /// Which rule took it out.
    #[serde(default)]
    pub kind: Left,
}

/// One racing decision.
#[derive(Debug, Clone, PartialEq)]
pub struct RaceStep {
    /// The column with the highest rank sum.
    pub best: usize,
    /// The test that gated the step: `Friedman` (three or more configurations, Conover's F
    /// form) or `Wilcoxon` (two).
    pub test: &'static str,
    /// The gate test's p-value.
    pub p_value: f64,
    /// Columns significantly worse than the best, with the p-value of that comparison
    /// (Conover's two-sided multiple comparison after Friedman, one-sided Wilcoxon with two).
    pub losers: Vec<(usize, f64)>,
}

/// The racing step of F-Race (Birattari et al., 2002) on `blocks` (rows: rounds; columns:
/// configurations; higher is better). With three or more configurations: when Friedman's test
/// (Conover's F form) rejects at `alpha`, every configuration whose rank sum falls short of the
/// best's by more than Conover's least significant difference loses. With two: the one-sided
/// Wilcoxon signed-rank test of the better against the other. `None` when the gate test does
/// not reject.
pub fn race_step(blocks: &[Vec<f64>], alpha: f64) -> Option<RaceStep> {
    let k = blocks.first()?.len();
    let col = |j: usize| blocks.iter().map(|row| row[j]).collect::<Vec<f64>>();
    if k == 2 {
        let (a, b) = (col(0), col(1));
        // With two columns the higher rank sum is the column winning more rounds.
        let a_wins = blocks.iter().filter(|row| row[0] > row[1]).count();
        let b_wins = blocks.iter().filter(|row| row[1] > row[0]).count();
        let (best, worst, w) = if a_wins >= b_wins {
            (0, 1, stats::wilcoxon(&a, &b, Alternative::Greater)?)
        } else {
            (1, 0, stats::wilcoxon(&b, &a, Alternative::Greater)?)
        };
        return (w.p_value < alpha).then(|| RaceStep {
            best,
            test: "Wilcoxon",
            p_value: w.p_value,
            losers: vec![(worst, w.p_value)],
        });
    }
    let f = stats::friedman(blocks)?;
    if f.f_p_value >= alpha {
        return None;
    }
    let best = (0..k).max_by(|&a, &c| f.rank_sums[a].total_cmp(&f.rank_sums[c]))?;
    let lsd = f.least_significant_difference(alpha);
    let losers = (0..k)
        .filter(|&j| j != best && f.rank_sums[best] - f.rank_sums[j] > lsd)
        .map(|j| (j, f.pair_p_value(best, j)))
        .collect();
    Some(RaceStep {
        best,
        test: "Friedman",
        p_value: f.f_p_value,
        losers,
    })
}

/// The racing decision after `round` on the configurations `alive` (by key), from the race
/// trials of rounds 1..=`round`: from round 3 those far behind the leader (`far_behind`);
/// from `run.min_rounds` those significantly worse than the best ([`race_step`]), then among
/// the rest those equivalent to the leader or tied with it beyond what the rounds left could
/// resolve, then those unlikely to be the best, and last, when choosing the leader is expected
/// to cost less than `run.stop_loss`, all but the leader (`settled`).
pub fn race_round(
    study: &Study,
    trials: &[TrialRecord],
    alive: &[String],
    round: usize,
) -> Vec<Elimination> {
    let goal = &study.objective.goal;
    let mut out = far_behind(study, trials, alive, round);
    if round < study.run.min_rounds {
        return out;
    }
    let rest: Vec<String> = staying(alive, &out).cloned().collect();
    if rest.len() < 2 {
        return out;
    }
    let b = blocks(goal, trials, &rest, round);
    if let Some(step) = race_step(&b, study.run.alpha) {
        for (j, p) in step.losers {
            out.push(Elimination {
                config: rest[j].clone(),
                round,
                reason: format!(
                    "worse than {} ({} p = {:.4}, pairwise p = {:.4})",
                    rest[step.best], step.test, step.p_value, p
                ),
                p_value: Some(p),
                kind: Left::Worse,
            });
        }
    }
    let close = close_to_leader(study, trials, alive, &out, round);
    out.extend(close);
    let unlikely = unlikely_to_win(study, trials, alive, &out, round);
    out.extend(unlikely);
    let settled = settled(study, trials, alive, &out, round);
    out.extend(settled);
    out
}

/// The configurations among `keys` not already in `leaving`.
fn staying<'a>(
    keys: &'a [String],
    leaving: &'a [Elimination],
) -> impl Iterator<Item = &'a String> + 'a {
    keys.iter()
        .filter(move |k| !leaving.iter().any(|e| &e.config == *k))
}

/// Configurations among `keys` more than `run.far_behind` behind the leader (the best mean
/// score among them) with significance: over the race rounds where both succeeded, the
/// one-sided upper bound at `run.alpha` of the configuration's paired ratio to the leader (in
/// the goal's direction; Student t on the log ratios) lies below 1 − `run.far_behind`. It
/// acts from round [`FAR_BEHIND_MIN_ROUNDS`], before the rank tests may: a rank test over a
/// dozen configurations and three rounds cannot tell half the throughput from 3 % less (both
/// are "last in every round"), this test can, and a config within a few percent of the leader
/// is not at risk (its ratio would have to look 20 % short with a small spread in every round;
/// one disturbed round widens the interval instead). The leader stays.
fn far_behind(
    study: &Study,
    trials: &[TrialRecord],
    keys: &[String],
    round: usize,
) -> Vec<Elimination> {
    let margin = study.run.far_behind;
    if margin <= 0.0 || round < FAR_BEHIND_MIN_ROUNDS || keys.len() < 2 {
        return Vec::new();
    }
    let goal = &study.objective.goal;
    let Some(leader) = best_mean(goal, trials, keys, round) else {
        return Vec::new();
    };
    let floor = (1.0 - margin).ln();
    keys.iter()
        .filter(|k| **k != leader)
        .filter_map(|k| {
            // The configuration's share of the leader per round, in the goal's direction.
            let d = log_advantage(goal, trials, k, &leader, round);
            let high = stats::upper_bound(&d, study.run.alpha)?;
            (high < floor).then(|| Elimination {
                config: k.clone(),
                round,
                reason: format!(
                    "far behind {leader}: ×{:.3} of it over {} rounds, at most ×{:.3} at one-sided {:.0} % (run.far_behind {:.0} %)",
                    stats::mean(&d).exp(),
                    d.len(),
                    high.exp(),
                    (1.0 - study.run.alpha) * 100.0,
                    margin * 100.0
                ),
                p_value: None,
                kind: Left::FarBehind,
            })
        })
        .collect()
}

/// Rounds before the chance-of-best rule: with few rounds a bootstrap has few distinct
/// resamples and a burst of host noise makes a configuration look hopeless (why 7:
/// `docs/study-file.md`, "Racing").
pub const CHANCE_MIN_ROUNDS: usize = 7;

/// Configurations among `keys` (not already leaving in `leaving`) whose chance of having the
/// best mean, over [`BOOTSTRAP_RESAMPLES`] bootstrap resamples of rounds 1..=`round` (whole
/// rounds, so the drift between rounds stays out), is below `run.min_chance`. A test asks
/// whether a configuration is worse than the best by more than chance; this asks whether it
/// can still be the best, which a configuration a little but steadily behind cannot, long
/// before a rank test with few rounds can say so. Resampling whole rounds keeps it robust to a
/// disturbed trial: resamples without that round still see the configuration as it is. The
/// configuration most often best always stays.
fn unlikely_to_win(
    study: &Study,
    trials: &[TrialRecord],
    keys: &[String],
    leaving: &[Elimination],
    round: usize,
) -> Vec<Elimination> {
    let floor = study.run.min_chance;
    if floor <= 0.0 || round < CHANCE_MIN_ROUNDS {
        return Vec::new();
    }
    let staying: Vec<String> = staying(keys, leaving).cloned().collect();
    if staying.len() < 2 {
        return Vec::new();
    }
    let b = blocks(&study.objective.goal, trials, &staying, round);
    let seed = study.run.seed ^ 0xB007_5742 ^ round as u64;
    let Some(chance) = stats::chance_best(&b, BOOTSTRAP_RESAMPLES, seed) else {
        return Vec::new();
    };
    let top = (0..chance.len())
        .max_by(|&a, &c| chance[a].total_cmp(&chance[c]))
        .unwrap_or(0);
    staying
        .into_iter()
        .zip(chance)
        .enumerate()
        .filter(|(j, (_, c))| *j != top && *c < floor)
        .map(|(_, (config, c))| Elimination {
            config,
            round,
            reason: format!(
                "unlikely to be the best: best in {:.1} % of {BOOTSTRAP_RESAMPLES} bootstrap resamples of the {round} rounds (below run.min_chance {:.1} %)",
                c * 100.0,
                floor * 100.0
            ),
            p_value: None,
            kind: Left::Unlikely,
        })
        .collect()
}

/// Configurations among `keys` (not already leaving in `leaving`) close to the leader, the
/// best mean score among the rest, over the race rounds where both succeeded:
/// - equivalent (with `run.drop_equivalent`): the paired ratio's distribution-free
///   (Hodges–Lehmann) interval at 1 − 2α lies within 1 ± `objective.min_effect` (two
///   one-sided tests at α; from 5 rounds on);
/// - tied: the rounds left could show it worse only with a conditional power below
///   `run.futility`, were its observed shortfall real.
///
/// Either way more rounds would not change the choice by more than the effect sought or than
/// the study can resolve, so they leave the race; the leader stays.
fn close_to_leader(
    study: &Study,
    trials: &[TrialRecord],
    keys: &[String],
    leaving: &[Elimination],
    round: usize,
) -> Vec<Elimination> {
    let goal = &study.objective.goal;
    let delta = study.objective.min_effect;
    let staying: Vec<&String> = staying(keys, leaving).collect();
    let Some(leader) = best_mean(goal, trials, staying.iter().copied(), round) else {
        return Vec::new();
    };
    let level = 1.0 - 2.0 * study.run.alpha;
    let mut out = Vec::new();
    for k in staying.into_iter().filter(|k| **k != leader) {
        let (x, y) = paired_values(trials, k, &leader, round as i64);
        let Some((same, ci)) = stats::equivalent(&x, &y, delta, level) else {
            continue;
        };
        if study.run.drop_equivalent && delta > 0.0 && same {
            out.push(Elimination {
                config: k.clone(),
                round,
                reason: format!(
                    "equivalent to {leader} within {:.1} %: ratio ×{:.3} ({:.0} % CI {:.3}–{:.3}, {} pairs)",
                    delta * 100.0,
                    ci.ratio,
                    level * 100.0,
                    ci.low,
                    ci.high,
                    ci.pairs
                ),
                p_value: None,
                kind: Left::Equivalent,
            });
            continue;
        }
        // The leader's advantage per round, in the goal's direction.
        let d = log_advantage(goal, trials, &leader, k, round);
        if study.run.futility > 0.0
            && let Some(cp) = stats::conditional_power(&d, study.run.repetitions, study.run.alpha)
            && cp < study.run.futility
        {
            let wide = stats::paired_ratio_ci(&x, &y, 0.95).unwrap_or(ci);
            out.push(Elimination {
                config: k.clone(),
                round,
                reason: format!(
                    "tied with {leader}: ratio ×{:.3} (95 % CI {:.3}–{:.3}, {} pairs); the {} rounds left would show a difference with probability {:.0} % (< run.futility {:.0} %)",
                    wide.ratio,
                    wide.low,
                    wide.high,
                    wide.pairs,
                    study.run.repetitions - round,
                    cp * 100.0,
                    study.run.futility * 100.0
                ),
                p_value: None,
                kind: Left::Tied,
            });
        }
    }
    out
}

/// The race's end by expected loss: when choosing the leader (the best mean among `keys`
/// not already in `leaving`) now is expected to cost less than `run.stop_loss` of its score,
/// every other configuration still racing leaves. The expected loss is the sum over them of
/// E[max(0, μ)], μ a rival's mean advantage over the leader in paired log ratios with a
/// Student-t posterior ([`stats::expected_loss`]; Chick & Inoue's expected opportunity cost,
/// Bonferroni form), in log-ratio units (ln(1 + x) ≈ x for the small shares it is compared
/// with). It ends a group of near-ties that no rank test has separated, once further rounds
/// could gain only what the user said is not worth them; a rival that is close but uncertain
/// keeps the loss up and the race going. With a rival lacking the three paired rounds a loss
/// needs, the race goes on. Not at the last round, where the race ends anyway.
fn settled(
    study: &Study,
    trials: &[TrialRecord],
    keys: &[String],
    leaving: &[Elimination],
    round: usize,
) -> Vec<Elimination> {
    let bound = study.run.stop_loss;
    // At the last round the race ends anyway; NaN (never from a parsed file) is off too.
    if bound.is_nan() || bound <= 0.0 || round >= study.run.repetitions {
        return Vec::new();
    }
    let goal = &study.objective.goal;
    let staying: Vec<&String> = staying(keys, leaving).collect();
    if staying.len() < 2 {
        return Vec::new();
    }
    let Some(leader) = best_mean(goal, trials, staying.iter().copied(), round) else {
        return Vec::new();
    };
    let mut loss = 0.0;
    let mut rivals = Vec::new();
    for k in staying.into_iter().filter(|k| **k != leader) {
        let d = log_advantage(goal, trials, k, &leader, round);
        let Some(e) = stats::expected_loss(&d) else {
            return Vec::new();
        };
        loss += e;
        rivals.push((k, stats::mean(&d).exp(), d.len()));
    }
    if loss >= bound {
        return Vec::new();
    }
    rivals
        .into_iter()
        .map(|(k, ratio, pairs)| Elimination {
            config: k.clone(),
            round,
            reason: format!(
                "settled: ×{ratio:.3} of {leader} over {pairs} rounds; choosing the leader now costs {:.2} % in expectation (below run.stop_loss {:.2} %)",
                loss * 100.0,
                bound * 100.0
            ),
            p_value: None,
            kind: Left::Settled,
        })
        .collect()
}

/// Resamples of the rounds behind `chance_best`.
pub(crate) const BOOTSTRAP_RESAMPLES: usize = 2000;

/// Each of `keys`' chance of having the best mean over rounds `1..=rounds` (a bootstrap of
/// the rounds; a failed trial counts as worse than every other of its round), best first,
/// configurations never best left out. Empty with fewer than two configurations or rounds.
pub(crate) fn chance_of_best(
    goal: &Goal,
    trials: &[TrialRecord],
    keys: &[String],
    rounds: usize,
    seed: u64,
) -> Vec<(String, f64)> {
    if keys.len() < 2 {
        return Vec::new();
    }
    let b = blocks(goal, trials, keys, rounds);
    let Some(chance) = stats::chance_best(&b, BOOTSTRAP_RESAMPLES, seed ^ 0xB007_5742) else {
        return Vec::new();
    };
    let mut out: Vec<(String, f64)> = keys
        .iter()
        .cloned()
        .zip(chance)
        .filter(|(_, c)| *c > 0.0)
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}

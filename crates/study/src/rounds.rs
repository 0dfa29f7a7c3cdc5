//! Rounds of trials for the runner: one trial after another in this process, or whole rounds
//! on the hosts of `--hosts` at the same time (`crate::hosts`); each completed trial is
//! recorded on this thread (stored, its warnings said, counted), and a trial the store already
//! holds (a resumed run) is not run again.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use perfpilot_store::{RunState, Store, TrialPhase, TrialRecord, TrialStatus};

use crate::error::{Result, StudyError};
use crate::hosts::{Event, Pool, PoolEnd, RoundJob};
use crate::plan::within_budget;
use crate::progress::Progress;
use crate::spec::Config;
use crate::trial::{TrialContext, TrialOutcome, driver_saturation, run_trial, to_record};

/// A round to run: every configuration in it, in its seeded order.
pub(crate) struct Round {
    /// Race or confirmation.
    pub phase: TrialPhase,
    /// The round.
    pub round: usize,
    /// The configurations in the round's order.
    pub order: Vec<Config>,
    /// For the progress lines ("race round 2 of at most 5").
    pub label: String,
}

/// A run in progress: its store, its trials so far (a resumed run's too), its progress and,
/// with `--hosts`, its hosts.
pub(crate) struct Session<'a> {
    pub ctx: TrialContext<'a>,
    pub store: Store,
    pub store_path: PathBuf,
    pub run_id: i64,
    pub progress: Progress,
    pub trials: Vec<TrialRecord>,
    /// Trials this invocation ran.
    pub trials_run: usize,
    /// Whether the saturated driver has been reported (once per run).
    pub driver_warned: bool,
    /// The hosts of `--hosts` (`None`: trials run here, one after another).
    pub pool: Option<Pool<'a>>,
    /// Hosts lost, for the summary's warnings.
    pub host_warnings: Vec<String>,
    /// Trials computed instead of run (`RunOptions::simulated`).
    pub simulated: Option<std::sync::Arc<dyn crate::runner::TrialSource>>,
}

impl Session<'_> {
    /// Rounds that run at the same time: the hosts left (1 without `--hosts`).
    pub fn width(&self) -> usize {
        self.pool.as_ref().map_or(1, Pool::width)
    }

    /// Whether the store holds the trial of `c` in `phase` and `round`.
    fn stored(&self, phase: TrialPhase, round: usize, c: &Config) -> bool {
        self.trials
            .iter()
            .any(|t| t.phase == phase && t.round == round as i64 && t.config == c.key())
    }

    /// Trials round `round` of the race holds once it has run with `alive` in it.
    pub fn round_size(&self, round: usize, alive: &[Config]) -> usize {
        let stored = self
            .trials
            .iter()
            .filter(|t| t.phase == TrialPhase::Race && t.round == round as i64)
            .count();
        stored
            + alive
                .iter()
                .filter(|c| !self.stored(TrialPhase::Race, round, c))
                .count()
    }

    /// Runs `rounds`: here one trial after another, or with hosts as many rounds at a time as
    /// there are hosts, each round on one host.
    pub fn run_rounds(&mut self, rounds: Vec<Round>) -> Result<()> {
        let pool = match self.simulated {
            Some(_) => None,
            None => self.pool.take(),
        };
        let Some(mut pool) = pool else {
            for r in &rounds {
                for c in &r.order {
                    self.trial_here(r.phase, r.round, c)?;
                }
                self.progress.round(r.label.clone());
            }
            return Ok(());
        };
        let mut jobs = Vec::new();
        for r in &rounds {
            let mut configs = Vec::new();
            for c in &r.order {
                if self.stored(r.phase, r.round, c) {
                    self.progress.inc();
                } else {
                    configs.push(c.clone());
                }
            }
            jobs.push(RoundJob {
                phase: r.phase,
                round: r.round,
                configs,
            });
        }
        let label = |job: &RoundJob| {
            rounds
                .iter()
                .find(|r| r.phase == job.phase && r.round == job.round)
                .map_or_else(|| job.label(), |r| r.label.clone())
        };
        let stop = self.ctx.stop;
        let ran = pool.run(&jobs, stop, &mut |ev| match ev {
            Event::Started { job, host, config } => {
                self.progress
                    .message(format!("{} on {host}: {}", job.label(), config.key()));
                Ok(())
            }
            Event::Done {
                job,
                host,
                outcomes,
            } => {
                for (c, o) in job.configs.iter().zip(outcomes) {
                    self.record(job.phase, job.round, c, o, Some(host))?;
                }
                self.progress.round(format!("{} on {host}", label(job)));
                Ok(())
            }
            Event::Lost {
                job,
                host,
                reason,
                left,
            } => {
                let then = match left.as_slice() {
                    [] => "no host is left".to_string(),
                    [one] => format!("the round is run again on {one}"),
                    more => format!("the round is run again on one of {}", more.join(", ")),
                };
                self.progress
                    .println(format!("host {host} lost in {}: {reason}; {then}", job.label()));
                self.host_warnings.push(format!(
                    "host {host} was lost in {} ({reason}); its trials of that round were dropped and the round ran again on another host",
                    job.label()
                ));
                Ok(())
            }
        });
        self.pool = Some(pool);
        // Rounds with nothing left to run (a resumed run) are done too.
        for (r, j) in rounds.iter().zip(&jobs) {
            if j.configs.is_empty() {
                self.progress.round(r.label.clone());
            }
        }
        match ran {
            Ok(()) => Ok(()),
            Err(PoolEnd::Interrupted) => Err(StudyError::Interrupted),
            Err(PoolEnd::Failed(e)) => Err(e),
            Err(PoolEnd::NoHostLeft(lost)) => Err(StudyError::HostsLost {
                run: self.run_id,
                store: self.store_path.clone(),
                lost: lost
                    .iter()
                    .map(|(h, why)| format!("{h}: {why}"))
                    .collect::<Vec<_>>()
                    .join("; "),
            }),
        }
    }

    /// Runs one trial of `c` in this process and records it; a stored one is not run again.
    fn trial_here(&mut self, phase: TrialPhase, round: usize, c: &Config) -> Result<()> {
        if self.stored(phase, round, c) {
            self.progress.inc();
            return Ok(());
        }
        if self.ctx.stop.load(Ordering::SeqCst) {
            return Err(StudyError::Interrupted);
        }
        self.progress
            .message(format!("{phase} round {round}: {}", c.key()));
        if let Some(sim) = &self.simulated {
            let o = sim.trial(c, phase, round);
            return self.record(phase, round, c, o, None);
        }
        let o = run_trial(&self.ctx, c, None);
        if self.ctx.stop.load(Ordering::SeqCst) {
            return Err(StudyError::Interrupted);
        }
        self.record(phase, round, c, o, None)?;
        std::thread::sleep(self.ctx.study.run.cooldown);
        Ok(())
    }

    /// Records trial `o` of `c` (run on `host`, with `--hosts`): the failure and warnings it
    /// calls for, the store, the progress.
    fn record(
        &mut self,
        phase: TrialPhase,
        round: usize,
        c: &Config,
        mut o: TrialOutcome,
        host: Option<&str>,
    ) -> Result<()> {
        let study = self.ctx.study;
        let progress = &self.progress;
        o.detail.host = host.map(str::to_string);
        let on = host.map_or(String::new(), |h| format!(" on {h}"));
        self.trials_run += 1;
        let rec = to_record(self.run_id, phase, round, c, &o);
        if o.status != TrialStatus::Ok {
            progress.println(format!(
                "trial {phase} {round} {}{on}: {}: {}",
                c.key(),
                o.status,
                o.reason
            ));
        }
        if let Some(m) = &o.detail.mser
            && !m.steady
        {
            progress.println(format!(
                "warning: {} ({phase} round {round}{on}) never reached a steady state (MSER-5 truncation point {} s of {} s); lengthen warmup or measure",
                c.key(),
                m.truncate,
                study.run.measure.as_secs()
            ));
        }
        if !self.driver_warned
            && let Some(why) = driver_saturation(study, &o.detail)
        {
            self.driver_warned = true;
            progress.println(format!(
                "warning: {} ({phase} round {round}{on}): {why}",
                c.key()
            ));
        }
        self.store.trial_add(&rec)?;
        self.trials.push(rec);
        progress.inc();
        Ok(())
    }

    /// Ends a run that stopped on `e`: the progress bar, and the run's state in the store
    /// (interrupted or failed). Returns the error to report (the store's, if that write fails).
    pub fn end(&mut self, e: StudyError) -> StudyError {
        self.progress.finish();
        let state = if matches!(e, StudyError::Interrupted) {
            RunState::Interrupted
        } else {
            RunState::Failed
        };
        match self.store.study_set_state(self.run_id, state, None) {
            Ok(()) => e,
            Err(se) => se.into(),
        }
    }
}

/// The race rounds of the next batch, from `next`: as many as `width` (the hosts; one round
/// without `--hosts`) up to `reps`, each within the budget (`(cap, reserve)`: trials in all,
/// trials kept for the confirmation) counting the `used` race trials before `next` and, for
/// the rounds of the batch before it, `size(round)` trials each (with `alive` configurations
/// left, every batch round holds them all). Also the last round before the budget ended the
/// race, if it did.
pub(crate) fn batch_rounds(
    next: usize,
    width: usize,
    reps: usize,
    budget: Option<(usize, usize)>,
    mut used: usize,
    alive: usize,
    size: impl Fn(usize) -> usize,
) -> (Vec<usize>, Option<usize>) {
    let mut rounds = Vec::new();
    for round in next..(next + width.max(1)).min(reps + 1) {
        if let Some((cap, reserve)) = budget
            && !within_budget(cap, used, round, alive, reserve)
        {
            return (rounds, Some(round - 1));
        }
        used += size(round);
        rounds.push(round);
    }
    (rounds, None)
}

/// Which host ran which rounds, from the trials' details: a note for the summary when the
/// run had hosts (`None` otherwise).
pub(crate) fn hosts_note(trials: &[TrialRecord]) -> Option<String> {
    let mut by_host: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for t in trials {
        let host = serde_json::from_str::<serde_json::Value>(&t.detail)
            .ok()
            .and_then(|d| d.get("host").and_then(|h| h.as_str()).map(str::to_string));
        let Some(host) = host else { continue };
        let round = match t.phase {
            TrialPhase::Confirm => format!("confirmation {}", t.round),
            _ => t.round.to_string(),
        };
        let rounds = by_host.entry(host).or_default();
        if !rounds.contains(&round) {
            rounds.push(round);
        }
    }
    if by_host.is_empty() {
        return None;
    }
    let parts: Vec<String> = by_host
        .iter()
        .map(|(h, rounds)| {
            let s = if rounds.len() == 1 { "" } else { "s" };
            format!("{h} ran round{s} {}", rounds.join(", "))
        })
        .collect();
    Some(format!(
        "trials ran on {} host(s), each round on one host: {}",
        by_host.len(),
        parts.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_holds_one_round_per_host_up_to_the_repetitions() {
        // No budget: rounds 1–2 on two hosts, then 3–4, then 5 alone.
        assert_eq!(batch_rounds(1, 2, 5, None, 0, 3, |_| 3), (vec![1, 2], None));
        assert_eq!(batch_rounds(3, 2, 5, None, 6, 3, |_| 3), (vec![3, 4], None));
        assert_eq!(batch_rounds(5, 2, 5, None, 12, 3, |_| 3), (vec![5], None));
        // Without hosts: one round at a time, as the sequential runner always ran.
        assert_eq!(batch_rounds(2, 1, 5, None, 3, 3, |_| 3), (vec![2], None));
        assert_eq!(batch_rounds(2, 0, 5, None, 3, 3, |_| 3), (vec![2], None));
    }

    #[test]
    fn the_budget_ends_a_batch_where_a_sequential_race_would_stop_or_earlier() {
        // 3 configurations, a cap of 13 trials with 4 kept for the confirmation: round 1 (3),
        // round 2 (6) and round 3 (9) fit; round 4 would need 12 + 4 > 13.
        let budget = Some((13, 4));
        assert_eq!(
            batch_rounds(1, 4, 8, budget, 0, 3, |_| 3),
            (vec![1, 2, 3], Some(3))
        );
        // Sequentially the same end.
        let mut used = 0;
        let mut ran = Vec::new();
        let mut end = None;
        for next in 1..=8 {
            let (r, e) = batch_rounds(next, 1, 8, budget, used, 3, |_| 3);
            ran.extend(&r);
            used += 3 * r.len();
            if e.is_some() {
                end = e;
                break;
            }
        }
        assert_eq!((ran, end), (vec![1, 2, 3], Some(3)));
        // A batch from round 2 counts its round 2 before judging round 3: the same end.
        assert_eq!(
            batch_rounds(2, 3, 8, budget, 3, 3, |_| 3),
            (vec![2, 3], Some(3))
        );
        // The first round always runs.
        assert_eq!(
            batch_rounds(1, 2, 8, Some((2, 4)), 0, 3, |_| 3),
            (vec![1], Some(1))
        );
    }
}

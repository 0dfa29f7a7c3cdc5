//! The host pool: whole rounds run on hosts at the same time, one round per host, each round's
//! trials in the round's own order on that one host (the host is then a blocking factor that
//! the round blocks absorb, and comparisons stay paired within a host). A host lost part way
//! through a round loses the round: its partial trials are dropped and the round goes back to
//! the queue for a host that is left.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use perfpilot_store::TrialPhase;

use super::HostLost;
use crate::error::StudyError;
use crate::spec::Config;
use crate::trial::{TrialContext, TrialOutcome, run_trial};

/// Where trials run: this process (`local`) or a study worker.
pub(crate) trait Host: Send {
    /// The host as `--hosts` named it.
    fn name(&self) -> &str;
    /// Runs one trial. `Err` means the host is lost (why, for people): the trial did not
    /// complete and the host takes no more trials.
    fn trial(
        &mut self,
        phase: TrialPhase,
        round: usize,
        config: &Config,
        stop: &AtomicBool,
    ) -> Result<TrialOutcome, HostLost>;
}

/// Trials in this process, on this machine.
pub(crate) struct LocalHost<'a> {
    /// What each trial needs (this machine's topology and knob journal).
    pub ctx: TrialContext<'a>,
}

/// `--hosts`' name of this process.
pub const LOCAL: &str = "local";

impl Host for LocalHost<'_> {
    fn name(&self) -> &str {
        LOCAL
    }

    fn trial(
        &mut self,
        _phase: TrialPhase,
        _round: usize,
        config: &Config,
        _stop: &AtomicBool,
    ) -> Result<TrialOutcome, HostLost> {
        // The context's stop is the run's own (Ctrl-C).
        Ok(run_trial(&self.ctx, config, None))
    }
}

/// One round for one host: the configurations still to run in it, in the round's order.
#[derive(Clone, Debug)]
pub(crate) struct RoundJob {
    /// Race or confirmation.
    pub phase: TrialPhase,
    /// The round.
    pub round: usize,
    /// The configurations to run, in order.
    pub configs: Vec<Config>,
}

impl RoundJob {
    /// "race round 3", "confirmation round 1".
    pub fn label(&self) -> String {
        match self.phase {
            TrialPhase::Confirm => format!("confirmation round {}", self.round),
            phase => format!("{phase} round {}", self.round),
        }
    }
}

/// What the pool reports while it runs rounds (on the caller's thread).
pub(crate) enum Event<'e> {
    /// `host` starts the trial of `config` in `job`.
    Started {
        job: &'e RoundJob,
        host: &'e str,
        config: &'e Config,
    },
    /// `host` ran every trial of `job`: the outcomes, in the job's order.
    Done {
        job: &'e RoundJob,
        host: &'e str,
        outcomes: Vec<TrialOutcome>,
    },
    /// `host` was lost during `job`: its trials of the round are dropped and the round is
    /// queued again for the hosts `left` (none: the round cannot run).
    Lost {
        job: &'e RoundJob,
        host: &'e str,
        reason: &'e HostLost,
        left: Vec<String>,
    },
}

/// Why [`Pool::run`] ended before every round ran.
#[derive(Debug)]
pub(crate) enum PoolEnd {
    /// The run's stop flag was set; rounds in flight were dropped.
    Interrupted,
    /// Every host was lost: (host, why), in the order they were lost.
    NoHostLeft(Vec<(String, HostLost)>),
    /// The caller's handling of an event failed (the store); rounds in flight finished.
    Failed(StudyError),
}

/// From a round's thread to the pool.
enum Msg<'a> {
    Started {
        job: usize,
        slot: usize,
        config: usize,
    },
    Finished {
        job: usize,
        slot: usize,
        host: Box<dyn Host + 'a>,
        outcomes: Vec<TrialOutcome>,
    },
    Lost {
        job: usize,
        slot: usize,
        reason: HostLost,
    },
}

/// Hosts that take whole rounds.
pub(crate) struct Pool<'a> {
    /// The hosts left, each with its place in `--hosts` (the first free one is taken first).
    hosts: Vec<(usize, String, Box<dyn Host + 'a>)>,
    /// Hosts lost so far: (host, why).
    lost: Vec<(String, HostLost)>,
    /// The pause after each trial on a host.
    cooldown: Duration,
}

impl<'a> Pool<'a> {
    /// A pool of `hosts` pausing `cooldown` after each trial.
    pub fn new(hosts: Vec<Box<dyn Host + 'a>>, cooldown: Duration) -> Pool<'a> {
        Pool {
            hosts: hosts
                .into_iter()
                .enumerate()
                .map(|(i, h)| (i, h.name().to_string(), h))
                .collect(),
            lost: Vec::new(),
            cooldown,
        }
    }

    /// Hosts left: rounds that can run at the same time.
    pub fn width(&self) -> usize {
        self.hosts.len()
    }

    /// Runs `jobs` (each a whole round) on the hosts, as many at a time as there are hosts,
    /// lower rounds first; `on` sees each event on this thread. A round lost with its host is
    /// queued again; rounds are never split between hosts.
    pub fn run(
        &mut self,
        jobs: &[RoundJob],
        stop: &AtomicBool,
        on: &mut dyn FnMut(Event<'_>) -> Result<(), StudyError>,
    ) -> Result<(), PoolEnd> {
        let mut queue: BTreeSet<usize> = (0..jobs.len())
            .filter(|&j| !jobs[j].configs.is_empty())
            .collect();
        let mut free: BTreeMap<usize, (String, Box<dyn Host + 'a>)> =
            std::mem::take(&mut self.hosts)
                .into_iter()
                .map(|(i, name, h)| (i, (name, h)))
                .collect();
        // Hosts running a round: slot → name.
        let mut busy: BTreeMap<usize, String> = BTreeMap::new();
        let mut failed: Option<StudyError> = None;
        let cooldown = self.cooldown;
        let lost = &mut self.lost;
        let (tx, rx) = mpsc::channel::<Msg<'a>>();
        std::thread::scope(|s| {
            loop {
                while failed.is_none() && !stop.load(Ordering::SeqCst) && !queue.is_empty() {
                    let Some((slot, (name, host))) = free.pop_first() else {
                        break;
                    };
                    let Some(j) = queue.pop_first() else { break };
                    busy.insert(slot, name);
                    let tx = tx.clone();
                    let job = &jobs[j];
                    s.spawn(move || run_round(host, (j, job), slot, stop, cooldown, &tx));
                }
                if busy.is_empty() {
                    break;
                }
                let Ok(msg) = rx.recv() else { break };
                match msg {
                    Msg::Started { job, slot, config } => {
                        let host = busy.get(&slot).map_or("?", String::as_str);
                        let ev = Event::Started {
                            job: &jobs[job],
                            host,
                            config: &jobs[job].configs[config],
                        };
                        if failed.is_none()
                            && let Err(e) = on(ev)
                        {
                            failed = Some(e);
                        }
                    }
                    Msg::Finished {
                        job,
                        slot,
                        host,
                        outcomes,
                    } => {
                        let name = busy.remove(&slot).unwrap_or_default();
                        let whole = outcomes.len() == jobs[job].configs.len();
                        if whole && failed.is_none() && !stop.load(Ordering::SeqCst) {
                            let ev = Event::Done {
                                job: &jobs[job],
                                host: &name,
                                outcomes,
                            };
                            if let Err(e) = on(ev) {
                                failed = Some(e);
                            }
                        } else if !whole {
                            queue.insert(job);
                        }
                        free.insert(slot, (name, host));
                    }
                    Msg::Lost { job, slot, reason } => {
                        let name = busy.remove(&slot).unwrap_or_default();
                        queue.insert(job);
                        let left = free
                            .values()
                            .map(|(n, _)| n.clone())
                            .chain(busy.values().cloned())
                            .collect();
                        let ev = Event::Lost {
                            job: &jobs[job],
                            host: &name,
                            reason: &reason,
                            left,
                        };
                        if failed.is_none()
                            && let Err(e) = on(ev)
                        {
                            failed = Some(e);
                        }
                        lost.push((name, reason));
                    }
                }
            }
        });
        self.hosts = free
            .into_iter()
            .map(|(i, (name, h))| (i, name, h))
            .collect();
        if let Some(e) = failed {
            return Err(PoolEnd::Failed(e));
        }
        if stop.load(Ordering::SeqCst) {
            return Err(PoolEnd::Interrupted);
        }
        if !queue.is_empty() {
            return Err(PoolEnd::NoHostLeft(self.lost.clone()));
        }
        Ok(())
    }
}

/// Runs round `job` (number `j` of the run's jobs) on `host`, in slot `slot`, telling the
/// pool through `tx`: each trial started, then the outcomes, or the host lost.
fn run_round<'a>(
    mut host: Box<dyn Host + 'a>,
    (j, job): (usize, &RoundJob),
    slot: usize,
    stop: &AtomicBool,
    cooldown: Duration,
    tx: &mpsc::Sender<Msg<'a>>,
) {
    let mut outcomes = Vec::with_capacity(job.configs.len());
    for (i, c) in job.configs.iter().enumerate() {
        let _ = tx.send(Msg::Started {
            job: j,
            slot,
            config: i,
        });
        match host.trial(job.phase, job.round, c, stop) {
            // A trial that the stop cut short is not a measurement.
            Ok(_) if stop.load(Ordering::SeqCst) => break,
            Ok(o) => outcomes.push(o),
            // Lost while stopping: the stop, not the host, ended it.
            Err(_) if stop.load(Ordering::SeqCst) => break,
            Err(reason) => {
                let _ = tx.send(Msg::Lost {
                    job: j,
                    slot,
                    reason,
                });
                return;
            }
        }
        std::thread::sleep(cooldown);
    }
    let _ = tx.send(Msg::Finished {
        job: j,
        slot,
        host,
        outcomes,
    });
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use perfpilot_store::TrialStatus;

    use super::*;
    use crate::spec::Level;

    /// (host, round, configuration) of every trial a fake host ran.
    type Log = Arc<Mutex<Vec<(String, usize, String)>>>;

    /// A host that measures the round number, and is lost at its `lose_at`-th trial or sets
    /// `stop` at its `stop_at`-th.
    struct Fake {
        name: String,
        trials: usize,
        lose_at: Option<usize>,
        stop_at: Option<(usize, Arc<AtomicBool>)>,
        log: Log,
    }

    impl Host for Fake {
        fn name(&self) -> &str {
            &self.name
        }

        fn trial(
            &mut self,
            _phase: TrialPhase,
            round: usize,
            config: &Config,
            _stop: &AtomicBool,
        ) -> Result<TrialOutcome, HostLost> {
            self.trials += 1;
            if self.lose_at == Some(self.trials) {
                return Err(HostLost::Closed {
                    how: "closed the connection".into(),
                });
            }
            if let Some((n, stop)) = &self.stop_at
                && *n == self.trials
            {
                stop.store(true, Ordering::SeqCst);
            }
            self.log
                .lock()
                .unwrap()
                .push((self.name.clone(), round, config.key()));
            Ok(TrialOutcome {
                status: TrialStatus::Ok,
                reason: String::new(),
                value: Some(round as f64),
                measurement: None,
                detail: Default::default(),
            })
        }
    }

    fn fake(name: &str, lose_at: Option<usize>, log: &Log) -> Box<dyn Host> {
        Box::new(Fake {
            name: name.into(),
            trials: 0,
            lose_at,
            stop_at: None,
            log: log.clone(),
        })
    }

    /// Race rounds 1..=n of three configurations.
    fn rounds(n: usize) -> Vec<RoundJob> {
        (1..=n)
            .map(|round| RoundJob {
                phase: TrialPhase::Race,
                round,
                configs: (1..=3)
                    .map(|x| Config(vec![("x".into(), Level::Int(x))]))
                    .collect(),
            })
            .collect()
    }

    /// What the pool said: (round, host) of each round done with its outcomes' count, and
    /// (round, host, hosts left) of each loss.
    #[derive(Default, Debug)]
    struct Said {
        done: Vec<(usize, String, usize)>,
        lost: Vec<(usize, String, Vec<String>)>,
    }

    fn run(
        pool: &mut Pool<'_>,
        jobs: &[RoundJob],
        stop: &AtomicBool,
    ) -> (Said, Result<(), PoolEnd>) {
        let mut said = Said::default();
        let end = pool.run(jobs, stop, &mut |ev| {
            match ev {
                Event::Started { .. } => {}
                Event::Done {
                    job,
                    host,
                    outcomes,
                } => said
                    .done
                    .push((job.round, host.to_string(), outcomes.len())),
                Event::Lost {
                    job, host, left, ..
                } => said.lost.push((job.round, host.to_string(), left)),
            }
            Ok(())
        });
        (said, end)
    }

    /// Each round's trials, by host.
    fn hosts_of_rounds(log: &Log) -> std::collections::BTreeMap<usize, BTreeSet<String>> {
        let mut by_round: std::collections::BTreeMap<usize, BTreeSet<String>> = Default::default();
        for (host, round, _) in log.lock().unwrap().iter() {
            by_round.entry(*round).or_default().insert(host.clone());
        }
        by_round
    }

    #[test]
    fn two_hosts_take_one_whole_round_each_at_a_time() {
        let log = Log::default();
        let mut pool = Pool::new(
            vec![fake("a", None, &log), fake("b", None, &log)],
            Duration::ZERO,
        );
        let stop = AtomicBool::new(false);
        let (said, end) = run(&mut pool, &rounds(4), &stop);
        assert!(end.is_ok(), "{end:?}");
        let mut done = said.done.clone();
        done.sort();
        assert_eq!(
            done.iter().map(|d| (d.0, d.2)).collect::<Vec<_>>(),
            [(1, 3), (2, 3), (3, 3), (4, 3)],
            "every round done, whole"
        );
        // The first two rounds start at once, one on each host, in the hosts' order.
        assert!(done.contains(&(1, "a".into(), 3)) && done.contains(&(2, "b".into(), 3)));
        // Every round's trials ran on the host that reported it, and on no other.
        let by_round = hosts_of_rounds(&log);
        for (round, host, _) in &said.done {
            assert_eq!(
                by_round[round],
                BTreeSet::from([host.clone()]),
                "round {round}"
            );
        }
        assert_eq!(pool.width(), 2);
        assert!(said.lost.is_empty());
    }

    #[test]
    fn a_round_lost_with_its_host_runs_again_whole_on_the_other() {
        let log = Log::default();
        // b is lost at its second trial: in the middle of round 2.
        let mut pool = Pool::new(
            vec![fake("a", None, &log), fake("b", Some(2), &log)],
            Duration::ZERO,
        );
        let stop = AtomicBool::new(false);
        let (said, end) = run(&mut pool, &rounds(4), &stop);
        assert!(end.is_ok(), "{end:?}");
        assert_eq!(said.lost, [(2, "b".to_string(), vec!["a".to_string()])]);
        let mut done = said.done.clone();
        done.sort();
        assert_eq!(
            done,
            [
                (1, "a".into(), 3),
                (2, "a".into(), 3),
                (3, "a".into(), 3),
                (4, "a".into(), 3)
            ],
            "b's partial round is dropped; a runs it whole"
        );
        // b's one trial of round 2 ran but was never reported.
        let by_round = hosts_of_rounds(&log);
        assert_eq!(by_round[&2], BTreeSet::from(["a".into(), "b".into()]));
        assert_eq!(pool.width(), 1, "b takes no more rounds");
    }

    #[test]
    fn with_every_host_lost_the_run_stops_and_names_them() {
        let log = Log::default();
        let mut pool = Pool::new(vec![fake("a", Some(5), &log)], Duration::ZERO);
        let stop = AtomicBool::new(false);
        let (said, end) = run(&mut pool, &rounds(3), &stop);
        let Err(PoolEnd::NoHostLeft(lost)) = end else {
            panic!("{end:?}")
        };
        let lost: Vec<(String, String)> = lost
            .iter()
            .map(|(h, why)| (h.clone(), why.to_string()))
            .collect();
        assert_eq!(
            lost,
            [(
                "a".to_string(),
                "the worker closed the connection".to_string()
            )]
        );
        assert_eq!(said.done, [(1, "a".into(), 3)], "round 1 stays done");
        assert_eq!(said.lost, [(2, "a".into(), vec![])]);
        assert_eq!(pool.width(), 0);
    }

    #[test]
    fn a_stop_drops_the_rounds_in_flight_and_starts_no_more() {
        let log = Log::default();
        let stop = Arc::new(AtomicBool::new(false));
        let host = Box::new(Fake {
            name: "a".into(),
            trials: 0,
            lose_at: None,
            stop_at: Some((2, stop.clone())),
            log: log.clone(),
        });
        let mut pool = Pool::new(vec![host], Duration::ZERO);
        let (said, end) = run(&mut pool, &rounds(3), &stop);
        assert!(matches!(end, Err(PoolEnd::Interrupted)), "{end:?}");
        assert!(said.done.is_empty(), "{said:?}");
        assert_eq!(log.lock().unwrap().len(), 2, "no trial after the stop");
        assert_eq!(pool.width(), 1, "the host is kept");
    }
}

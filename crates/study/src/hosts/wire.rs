//! The study coordinator–worker protocol: one JSON message per line over TCP, framed by
//! `perfpilot_fetch::lines` (the one home of that framing).

use perfpilot_observe::Topology;
use perfpilot_store::TrialPhase;
use serde::{Deserialize, Serialize};

use crate::spec::Config;
use crate::trial::TrialOutcome;

/// The protocol's own version; a change of message shapes bumps it, and perfpilot's version
/// is compared too, so that a worker and a coordinator of different builds never mix trials.
pub const PROTOCOL: u32 = 1;

/// Coordinator → worker.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum Request {
    /// First: who is talking.
    Hello {
        /// perfpilot's version.
        version: String,
        /// [`PROTOCOL`].
        protocol: u32,
    },
    /// The study to run trials of.
    Study {
        /// The study file's text.
        source: String,
        /// The path it was read from (its errors name it).
        path: String,
        /// The coordinator's working directory: relative paths of the study resolve against
        /// it on the worker too, so the worker's host needs the study's files at the same
        /// paths.
        workdir: String,
    },
    /// Run one trial and answer with its outcome.
    Trial {
        /// Race or confirmation.
        phase: TrialPhase,
        /// The round.
        round: usize,
        /// The configuration.
        config: Config,
    },
    /// Stop the trial running now (Ctrl-C on the coordinator); the session ends after it.
    Stop,
}

/// Worker → coordinator.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum Reply {
    /// The worker's hello.
    Hello {
        /// perfpilot's version.
        version: String,
        /// [`PROTOCOL`].
        protocol: u32,
    },
    /// The session is refused, and why.
    Refused {
        /// Why, for people.
        reason: String,
    },
    /// The study parsed and passed the preflight on the worker's host.
    Ready {
        /// The worker's topology (layouts are planned on it).
        topology: Box<Topology>,
        /// The worker's machine facts (as stored with a run).
        facts: String,
    },
    /// The study cannot run on the worker's host: what its parse or preflight found.
    Unready {
        /// Each error, as `study validate` prints it.
        errors: Vec<String>,
    },
    /// A trial is running and the worker is alive (every second).
    Alive,
    /// A trial's outcome.
    Outcome {
        /// What the trial measured.
        outcome: Box<TrialOutcome>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfpilot_fetch::lines::{recv, send};
    use perfpilot_store::TrialStatus;

    #[test]
    fn requests_and_outcomes_survive_the_wire() {
        let mut buf = Vec::new();
        let config = Config(vec![("x".into(), crate::spec::Level::Int(2))]);
        send(
            &mut buf,
            &Request::Trial {
                phase: TrialPhase::Confirm,
                round: 3,
                config: config.clone(),
            },
        )
        .unwrap();
        let outcome = TrialOutcome {
            status: TrialStatus::Violated,
            reason: "p99 < 1ms: 2 ms".into(),
            value: Some(1234.5),
            measurement: None,
            detail: Default::default(),
        };
        send(
            &mut buf,
            &Reply::Outcome {
                outcome: Box::new(outcome),
            },
        )
        .unwrap();
        let mut r = std::io::BufReader::new(buf.as_slice());
        let Some(Request::Trial {
            phase,
            round,
            config: c,
        }) = recv(&mut r).unwrap()
        else {
            panic!("not a trial request")
        };
        assert_eq!((phase, round, c), (TrialPhase::Confirm, 3, config));
        let Some(Reply::Outcome { outcome }) = recv(&mut r).unwrap() else {
            panic!("not an outcome")
        };
        assert_eq!(outcome.status, TrialStatus::Violated);
        assert_eq!(outcome.value, Some(1234.5));
        assert!(recv::<Reply>(&mut r).unwrap().is_none());
    }

    #[test]
    fn the_fuzz_seeds_are_messages_of_the_current_shapes() {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fuzz/corpus/worker_messages"
        );
        for (file, request) in [
            ("hello.jsonl", true),
            ("study.jsonl", true),
            ("trial.jsonl", true),
            ("outcome.jsonl", false),
        ] {
            let text = std::fs::read(format!("{dir}/{file}")).unwrap();
            let mut r = std::io::BufReader::new(text.as_slice());
            let ok = match request {
                true => recv::<Request>(&mut r).map(|m| m.is_some()),
                false => recv::<Reply>(&mut r).map(|m| m.is_some()),
            };
            assert!(matches!(ok, Ok(true)), "{file}: {ok:?}");
        }
    }
}

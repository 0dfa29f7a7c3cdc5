//! The one error type of the crate: every variant names the station, class, measurement or
//! field at fault and says what a valid value looks like.

use thiserror::Error;

/// What can go wrong building, solving, fitting or reading a model.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ModelError {
    #[error("the network has no stations")]
    NoStations,
    #[error("the network has no classes; add at least one closed class with a population")]
    NoClasses,
    #[error("duplicate station name `{0}`")]
    DuplicateStation(String),
    #[error("duplicate class name `{0}`")]
    DuplicateClass(String),
    #[error("unknown station `{0}`")]
    UnknownStation(String),
    #[error("unknown class `{0}`")]
    UnknownClass(String),
    #[error(
        "station `{station}`: {field} for class `{class}` is {value}; it must be finite and >= 0"
    )]
    BadDemand {
        station: String,
        class: String,
        field: &'static str,
        value: f64,
    },
    #[error(
        "station `{station}`: no class visits it (every demand is 0); give it a demand > 0 or remove it"
    )]
    NotVisited { station: String },
    #[error("station `{station}`: a multi-server station needs at least 1 server, got servers = 0")]
    ZeroServers { station: String },
    #[error(
        "station `{station}`: load-dependent rate #{index} is {value}; rates must be finite and > 0"
    )]
    BadRate {
        station: String,
        index: usize,
        value: f64,
    },
    #[error("station `{station}`: a load-dependent station needs at least one rate in `rates`")]
    NoRates { station: String },
    #[error("class `{class}`: population is 0; a closed class needs at least 1 customer")]
    ZeroPopulation { class: String },
    #[error("class `{class}`: arrival rate is {value}; it must be finite and > 0")]
    BadArrivalRate { class: String, value: f64 },
    #[error(
        "class `{class}`: an open class (arrival_rate) takes neither population nor think_time"
    )]
    OpenAndClosed { class: String },
    #[error(
        "station `{station}`: open classes alone use {utilization} of it; it must stay below 1 (the open load saturates it)"
    )]
    OpenSaturated { station: String, utilization: f64 },
    #[error("class `{class}`: think time is {value}; it must be finite and >= 0")]
    BadThinkTime { class: String, value: f64 },
    #[error("class `{class}` has no positive demand at any station and no think time")]
    ClassWithoutDemand { class: String },
    #[error("station `{station}`: field `{field}`: {message}")]
    StationField {
        station: String,
        field: &'static str,
        message: String,
    },
    #[error("measurement `{label}`: field `{field}`: {message}")]
    BadMeasurement {
        label: String,
        field: String,
        message: String,
    },
    #[error(
        "measurement `{label}`: utilization of station `{station}` is {value} busy cores, above its {cores} cores"
    )]
    UtilizationAboveCores {
        label: String,
        station: String,
        value: f64,
        cores: f64,
    },
    #[error(
        "station `{station}`: no measurement gives its utilization and the model states no demand for it"
    )]
    Unfittable { station: String },
    #[error(
        "the exact solver would visit {states} population vectors (limit {limit}); use the Bard-Schweitzer approximation (method = schweitzer)"
    )]
    TooLarge { states: u128, limit: u128 },
    #[error("{method} cannot solve station `{station}`: {reason}")]
    Unsupported {
        method: &'static str,
        station: String,
        reason: String,
    },
    #[error("JMVA XML: {0}")]
    Jmva(String),
    #[error("JMVA XML: element <{element}> cannot be represented: {reason}")]
    JmvaUnsupported { element: String, reason: String },
    #[error("model file: {0}")]
    File(String),
}

//! The one error type of the crate: every variant names the station, class, measurement or
//! field at fault and says what a valid value looks like.

use thiserror::Error;

/// What can go wrong building, solving, fitting or reading a model.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ModelError {
    /// The network or file declares no station.
    #[error("the network has no stations")]
    NoStations,
    /// The network or file declares no class.
    #[error("the network has no classes; add at least one closed class with a population")]
    NoClasses,
    /// Two stations share a name.
    #[error("duplicate station name `{0}`")]
    DuplicateStation(String),
    /// Two classes share a name.
    #[error("duplicate class name `{0}`")]
    DuplicateClass(String),
    /// A name refers to no station of the network.
    #[error("unknown station `{0}`")]
    UnknownStation(String),
    /// A name refers to no class of the network.
    #[error("unknown class `{0}`")]
    UnknownClass(String),
    /// A demand, service time or visit count is negative or not finite.
    #[error(
        "station `{station}`: {field} for class `{class}` is {value}; it must be finite and >= 0"
    )]
    BadDemand {
        /// The station.
        station: String,
        /// The class.
        class: String,
        /// The field as written in the file (`demand`, `service_time`, `visits`).
        field: &'static str,
        /// The value given.
        value: f64,
    },
    /// A station no class visits.
    #[error(
        "station `{station}`: no class visits it (every demand is 0); give it a demand > 0 or remove it"
    )]
    NotVisited {
        /// The station.
        station: String,
    },
    /// A multi-server station with no server.
    #[error("station `{station}`: a multi-server station needs at least 1 server, got servers = 0")]
    ZeroServers {
        /// The station.
        station: String,
    },
    /// A load-dependent rate that is not a positive finite number.
    #[error(
        "station `{station}`: load-dependent rate #{index} is {value}; rates must be finite and > 0"
    )]
    BadRate {
        /// The station.
        station: String,
        /// Position of the rate in `rates`, from 1 (the rate with that many customers present).
        index: usize,
        /// The rate given.
        value: f64,
    },
    /// A load-dependent station without rates.
    #[error("station `{station}`: a load-dependent station needs at least one rate in `rates`")]
    NoRates {
        /// The station.
        station: String,
    },
    /// A closed class without customers.
    #[error("class `{class}`: population is 0; a closed class needs at least 1 customer")]
    ZeroPopulation {
        /// The class.
        class: String,
    },
    /// An open class's arrival rate is not a positive finite number.
    #[error("class `{class}`: arrival rate is {value}; it must be finite and > 0")]
    BadArrivalRate {
        /// The class.
        class: String,
        /// The rate given.
        value: f64,
    },
    /// A class given both an arrival rate and a population or think time.
    #[error(
        "class `{class}`: an open class (arrival_rate) takes neither population nor think_time"
    )]
    OpenAndClosed {
        /// The class.
        class: String,
    },
    /// Open classes alone load a station to 1 or more.
    #[error(
        "station `{station}`: open classes alone use {utilization} of it; it must stay below 1 (the open load saturates it)"
    )]
    OpenSaturated {
        /// The station.
        station: String,
        /// Utilization by the open classes alone.
        utilization: f64,
    },
    /// A think time that is negative or not finite.
    #[error("class `{class}`: think time is {value}; it must be finite and >= 0")]
    BadThinkTime {
        /// The class.
        class: String,
        /// The think time given.
        value: f64,
    },
    /// A class that spends no time anywhere.
    #[error("class `{class}` has no positive demand at any station and no think time")]
    ClassWithoutDemand {
        /// The class.
        class: String,
    },
    /// A station's field is missing, contradicts another, or is out of range.
    #[error("station `{station}`: field `{field}`: {message}")]
    StationField {
        /// The station.
        station: String,
        /// The field as written in the file.
        field: &'static str,
        /// What is wrong and what a valid value looks like.
        message: String,
    },
    /// A measured load point's field is missing or out of range.
    #[error("measurement `{label}`: field `{field}`: {message}")]
    BadMeasurement {
        /// The point's label (or "N clients").
        label: String,
        /// The field, e.g. `throughput` or `utilization.app`.
        field: String,
        /// What is wrong and what a valid value looks like.
        message: String,
    },
    /// A measured utilization above the station's core count.
    #[error(
        "measurement `{label}`: utilization of station `{station}` is {value} busy cores, above its {cores} cores"
    )]
    UtilizationAboveCores {
        /// The point's label.
        label: String,
        /// The station.
        station: String,
        /// Busy cores measured.
        value: f64,
        /// Cores the station has during the point.
        cores: f64,
    },
    /// A station whose demand is neither stated nor measured.
    #[error(
        "station `{station}`: no measurement gives its utilization and the model states no demand for it"
    )]
    Unfittable {
        /// The station.
        station: String,
    },
    /// The exact solver would visit too many population vectors.
    #[error(
        "the exact solver would visit {states} population vectors (limit {limit}); use the Bard-Schweitzer approximation (method = schweitzer)"
    )]
    TooLarge {
        /// Population vectors (or stored probabilities) the solve would need.
        states: u128,
        /// The most the solver accepts.
        limit: u128,
    },
    /// A solver cannot handle a station of the network.
    #[error("{method} cannot solve station `{station}`: {reason}")]
    Unsupported {
        /// The solver.
        method: &'static str,
        /// The station it cannot solve.
        station: String,
        /// Why, and what to use instead.
        reason: String,
    },
    /// JMVA XML that is malformed or lacks what a model needs.
    #[error("JMVA XML: {0}")]
    Jmva(String),
    /// A JMVA element this crate cannot represent.
    #[error("JMVA XML: element <{element}> cannot be represented: {reason}")]
    JmvaUnsupported {
        /// The element's name.
        element: String,
        /// Why it cannot be represented.
        reason: String,
    },
    /// A model file that cannot be read, parsed or written, or that asks for something inconsistent.
    #[error("model file: {0}")]
    File(String),
}

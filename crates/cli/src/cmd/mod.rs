//! One module per subcommand.

pub mod bench;
pub mod daemon;
pub mod drive;
pub mod dump;
pub mod model;
pub mod observe;
pub mod record;
pub mod study;
pub mod topology;

//! One module per subcommand.

pub mod bench;
pub mod observe;
pub mod topology;

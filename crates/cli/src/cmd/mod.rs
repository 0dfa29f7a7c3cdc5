//! One module per subcommand.

pub mod model;

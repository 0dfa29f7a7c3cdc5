//! One module per subcommand.
pub mod drive;

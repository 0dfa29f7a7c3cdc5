//! Installing missing tools from Debian packages (`--install`); without it a missing tool makes
//! its server or cell "not installed" in the results.

use std::process::Command;

use anyhow::{Result, bail};

/// An executable and the Debian package that provides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tool {
    /// The executable's name.
    pub exe: &'static str,
    /// Its Debian 12 package.
    pub package: &'static str,
}

/// Shorthand for a [`Tool`].
pub const fn tool(exe: &'static str, package: &'static str) -> Tool {
    Tool { exe, package }
}

/// The tools of `tools` that are not installed.
pub fn missing(tools: &[Tool]) -> Vec<Tool> {
    tools
        .iter()
        .copied()
        .filter(|t| perfpilot_lab::tool::find(t.exe).is_none())
        .collect()
}

/// `None` when every tool is there; otherwise what is missing, in words.
pub fn check(tools: &[Tool]) -> Option<String> {
    let m = missing(tools);
    (!m.is_empty()).then(|| {
        let names: Vec<String> = m
            .iter()
            .map(|t| format!("{} (package {})", t.exe, t.package))
            .collect();
        format!("{} missing; run with --install", names.join(", "))
    })
}

/// Installs the packages of the missing `tools` with apt-get (updating the package lists once
/// when the first attempt fails).
pub fn install(tools: &[Tool]) -> Result<()> {
    let mut packages: Vec<&str> = missing(tools).iter().map(|t| t.package).collect();
    packages.sort_unstable();
    packages.dedup();
    if packages.is_empty() {
        return Ok(());
    }
    eprintln!("proof: installing {}", packages.join(" "));
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    let mut args = vec!["install", "-y", "-qq", "--no-install-recommends"];
    args.extend(&packages);
    if apt(&args) || (apt(&["update", "-qq"]) && apt(&args)) {
        return Ok(());
    }
    bail!(
        "apt-get install {} failed (its output is above); install them by hand",
        packages.join(" ")
    )
}

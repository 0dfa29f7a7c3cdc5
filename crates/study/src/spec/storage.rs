//! `[storage]`: a scratch file system each trial makes on a loop device, mounts, runs on, and
//! removes (through `perfpilot_sys::change`, journaled). The file system and its `mkfs`
//! options come from a template, usually a factor: `filesystem = "{filesystem}"` with levels
//! such as `"ext4"`, `"ext4 -b 1024 -N 200000"`, `"xfs -b size=1024"` (the first word is the
//! type, the rest `mkfs` options). `{mount}` and `{device}` then name it in every template.

use std::path::PathBuf;

use perfpilot_sys::scratchfs::ScratchSpec;
use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::raw::RawStorage;
use super::source::Source;
use perfpilot_lab::server::command::{WordsError, split_words};

use super::template::{TRIAL_PLACEHOLDERS, Templates, render};
use crate::error::Result;
use crate::spec::Config;

/// The smallest scratch file system (XFS refuses less than 300 MiB).
const MIN_SIZE: u64 = 300 << 20;

/// A configuration's `storage.filesystem` that names no usable file system.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScratchError {
    /// The filled-in template cannot be split into words.
    #[error("storage.filesystem {text:?}: {source}")]
    Words {
        /// The template filled in.
        text: String,
        /// Why.
        #[source]
        source: WordsError,
    },
    /// The filled-in template holds no type.
    #[error("storage.filesystem {text:?} names no type: give a type such as ext4 or xfs")]
    NoType {
        /// The template filled in.
        text: String,
    },
}

/// A `storage.size` that is not a size.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// No number.
    #[error("{given:?} is not a size such as 1GiB or 512M")]
    NotASize {
        /// The size as written.
        given: String,
    },
    /// A unit other than K, M, G or T.
    #[error("{given:?}: unknown unit {unit:?} (use K, M, G or T)")]
    Unit {
        /// The size as written.
        given: String,
        /// The unit as written.
        unit: String,
    },
}

/// The scratch file system of each trial.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Storage {
    /// The backing file's size, bytes.
    pub size_bytes: u64,
    /// The mount point.
    pub mount: PathBuf,
    /// The backing file (default: `perfpilot-scratch.img` beside the mount point).
    pub backing: PathBuf,
    /// Template of the type and mkfs options (`{filesystem}`; default `ext4`).
    pub filesystem: String,
    /// Template of the mount options (default none).
    pub mount_options: String,
}

impl Storage {
    /// The scratch file system of configuration `config` (`values`: its template values):
    /// the type, options and paths filled in. An empty type is an error in words.
    pub fn spec(
        &self,
        values: &std::collections::BTreeMap<String, String>,
    ) -> std::result::Result<ScratchSpec, ScratchError> {
        let text = render(&self.filesystem, values);
        let mut words = split_words(&text)
            .map_err(|source| ScratchError::Words {
                text: text.clone(),
                source,
            })?
            .into_iter();
        let fstype = words.next().ok_or(ScratchError::NoType { text })?;
        Ok(ScratchSpec {
            backing: self.backing.clone(),
            size_bytes: self.size_bytes,
            fstype,
            mkfs_options: words.collect(),
            mount: self.mount.clone(),
            mount_options: render(&self.mount_options, values),
        })
    }

    /// Why `config`'s file system cannot be made here (`None`: it can).
    pub fn unavailable(&self, config: &Config) -> Option<String> {
        let values = crate::deploy::values_for(config, config.instances(), None);
        match self.spec(&values) {
            Err(e) => Some(e.to_string()),
            Ok(s) => perfpilot_sys::scratchfs::unavailable(&s.fstype)
                .map(|why| format!("file system {}: {why}", s.fstype)),
        }
    }
}

/// Parses a size: a number with an optional unit `K`, `M`, `G`, `T` (powers of 1024; `KiB`,
/// `MB` and so on read the same).
pub(super) fn parse_size(s: &str) -> std::result::Result<u64, SizeError> {
    let t = s.trim();
    let digits = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: f64 = num.parse().map_err(|_| SizeError::NotASize {
        given: s.to_string(),
    })?;
    let shift = match unit.trim().to_ascii_uppercase().trim_end_matches('B') {
        "" => 0,
        "K" | "KI" => 10,
        "M" | "MI" => 20,
        "G" | "GI" => 30,
        "T" | "TI" => 40,
        _ => {
            return Err(SizeError::Unit {
                given: s.to_string(),
                unit: unit.to_string(),
            });
        }
    };
    Ok((n * (1u64 << shift) as f64) as u64)
}

/// Checks `[storage]`.
pub(super) fn storage(
    source: &Source,
    templates: &Templates,
    raw: &Spanned<RawStorage>,
) -> Result<Storage> {
    let s = raw.get_ref();
    let size_bytes =
        parse_size(s.size.get_ref()).map_err(|e| source.bad(&s.size, "storage.size", e))?;
    if size_bytes < MIN_SIZE {
        return Err(source.bad(
            &s.size,
            "storage.size",
            "must be at least 300M (XFS refuses smaller file systems)",
        ));
    }
    let mount = s.mount.get_ref().clone();
    if !mount.is_absolute() || mount.parent().is_none() {
        return Err(source.bad(
            &s.mount,
            "storage.mount",
            format!(
                "{} must be an absolute path below / (a directory each trial mounts on)",
                mount.display()
            ),
        ));
    }
    let backing = match &s.backing {
        Some(b) if b.get_ref().is_absolute() => b.get_ref().clone(),
        Some(b) => {
            return Err(source.bad(b, "storage.backing", "must be an absolute path"));
        }
        None => mount.with_file_name(format!(
            "{}.img",
            mount
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "perfpilot-scratch".into())
        )),
    };
    if backing.starts_with(&mount) {
        return Err(source.bad(
            &s.mount,
            "storage.backing",
            "the backing file cannot be under the mount point",
        ));
    }
    let filesystem = match &s.filesystem {
        None => "ext4".to_string(),
        Some(f) => {
            templates.check(f, "storage.filesystem", &TRIAL_PLACEHOLDERS)?;
            f.get_ref().clone()
        }
    };
    let mount_options = match &s.mount_options {
        None => String::new(),
        Some(o) => {
            templates.check(o, "storage.mount_options", &TRIAL_PLACEHOLDERS)?;
            o.get_ref().clone()
        }
    };
    Ok(Storage {
        size_bytes,
        mount,
        backing,
        filesystem,
        mount_options,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_with_binary_units() {
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("1.5g"), Ok(3 << 29));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("lots").is_err());
        assert!(
            parse_size("3 parsecs")
                .unwrap_err()
                .to_string()
                .contains("unknown unit")
        );
    }
}

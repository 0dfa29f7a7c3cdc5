//! Templates: `{name}` placeholders in commands, URLs, environment values and knob values,
//! checked against the study's factors, filled per trial, and command lines split into words.

use std::collections::BTreeMap;

use toml::Spanned;

use super::factor::Factor;
use super::source::Source;
use crate::error::Result;

/// Placeholders every deployment template may use besides the factors.
pub const DEPLOY_PLACEHOLDERS: [&str; 6] =
    ["port", "instance", "cpus", "cpuset", "nodes", "instances"];

/// Placeholders a load command may use besides the factors.
pub const LOAD_PLACEHOLDERS: [&str; 6] = [
    "targets",
    "users",
    "duration_s",
    "warmup_s",
    "instances",
    "ports",
];

/// Placeholders every template may use when the study has a `[storage]` section: the scratch
/// file system's mount point and its loop device's name (`loop3`).
pub const STORAGE_PLACEHOLDERS: [&str; 2] = ["mount", "device"];

/// Placeholders of setup and teardown commands and knob values besides the factors.
pub(super) const TRIAL_PLACEHOLDERS: [&str; 1] = ["instances"];

/// A template whose `{` has no closing `}`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a `{{` at byte {at} has no closing `}}`: close it, or write `{{{{` for a literal brace")]
pub struct UnclosedBrace {
    /// The brace's byte offset in the template.
    pub at: usize,
}

/// The names in `{name}` placeholders of a template (`{{` and `}}` are literal braces).
pub fn placeholders(template: &str) -> std::result::Result<Vec<String>, UnclosedBrace> {
    let mut names = Vec::new();
    let mut chars = template.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '{' if chars.peek().map(|p| p.1) == Some('{') => {
                chars.next();
            }
            '}' if chars.peek().map(|p| p.1) == Some('}') => {
                chars.next();
            }
            '{' => {
                let rest = &template[i + 1..];
                let Some(end) = rest.find('}') else {
                    return Err(UnclosedBrace { at: i });
                };
                names.push(rest[..end].trim().to_string());
                for _ in 0..end + 1 {
                    chars.next();
                }
            }
            _ => {}
        }
    }
    Ok(names)
}

/// Fills `{name}` placeholders from `values` (unknown names are left as written; validation
/// rejected them already). `{{` and `}}` become `{` and `}`.
pub fn render(template: &str, values: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(pos) = rest.find(['{', '}']) {
        out.push_str(&rest[..pos]);
        let tail = &rest[pos..];
        if tail.starts_with("{{") || tail.starts_with("}}") {
            out.push_str(&tail[..1]);
            rest = &tail[2..];
        } else if tail.starts_with('{') {
            match tail.find('}') {
                Some(end) => {
                    let name = tail[1..end].trim();
                    match values.get(name) {
                        Some(v) => out.push_str(v),
                        None => out.push_str(&tail[..=end]),
                    }
                    rest = &tail[end + 1..];
                }
                None => {
                    out.push_str(tail);
                    rest = "";
                }
            }
        } else {
            out.push('}');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// Checks templates of one study: every placeholder is a factor or one the field allows.
pub(super) struct Templates<'a> {
    source: &'a Source<'a>,
    factors: Vec<&'a str>,
    /// Whether [`STORAGE_PLACEHOLDERS`] are known (the study has `[storage]`).
    storage: bool,
}

impl<'a> Templates<'a> {
    pub(super) fn new(
        source: &'a Source<'a>,
        factors: &'a [Factor],
        storage: bool,
    ) -> Templates<'a> {
        Templates {
            source,
            factors: factors.iter().map(|f| f.name.as_str()).collect(),
            storage,
        }
    }

    /// Whether the study has a factor called `name`.
    pub(super) fn has_factor(&self, name: &str) -> bool {
        self.factors.contains(&name)
    }

    /// Rejects a template whose braces do not close or whose placeholder is neither a factor
    /// nor one of `extra`, listing the known ones.
    pub(super) fn check(
        &self,
        template: &Spanned<String>,
        field: &str,
        extra: &[&str],
    ) -> Result<()> {
        let names =
            placeholders(template.get_ref()).map_err(|m| self.source.bad(template, field, m))?;
        let storage: &[&str] = if self.storage {
            &STORAGE_PLACEHOLDERS
        } else {
            &[]
        };
        for n in names {
            if !extra.contains(&n.as_str())
                && !storage.contains(&n.as_str())
                && !self.has_factor(&n)
            {
                if STORAGE_PLACEHOLDERS.contains(&n.as_str()) {
                    return Err(self.source.bad(
                        template,
                        field,
                        format!("{{{n}}} names the scratch file system: add a [storage] section (size, mount) so each trial makes one"),
                    ));
                }
                let mut known: Vec<&str> = extra.to_vec();
                known.extend(storage.iter().copied());
                known.extend(self.factors.iter().copied().filter(|f| !extra.contains(f)));
                let known = known
                    .iter()
                    .map(|k| format!("{{{k}}}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(self.source.bad(
                    template,
                    field,
                    format!(
                        "unknown placeholder {{{n}}}: not a factor of this study; known: {known}"
                    ),
                ));
            }
        }
        Ok(())
    }
}

//! The study file being checked: its name and text, which turn a value's span (from
//! `toml::Spanned`) into the line an error names.

use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use perfpilot_drive::parse_duration;
use toml::Spanned;

use crate::error::{Result, StudyError};

/// The file under validation; every check reports through it so errors name file, line, field.
pub(super) struct Source<'a> {
    path: &'a Path,
    text: &'a str,
}

impl<'a> Source<'a> {
    pub(super) fn new(path: &'a Path, text: &'a str) -> Source<'a> {
        Source { path, text }
    }

    /// The 1-based line holding byte `offset` of the text.
    fn line(&self, offset: usize) -> usize {
        let before = self.text.get(..offset).unwrap_or(self.text);
        before.matches('\n').count() + 1
    }

    /// An invalid-field error at the line where `span` starts.
    pub(super) fn invalid(
        &self,
        span: Range<usize>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> StudyError {
        StudyError::invalid(self.path, self.line(span.start), field, message)
    }

    /// An invalid-field error at the line of `value`.
    pub(super) fn bad<T>(
        &self,
        value: &Spanned<T>,
        field: impl Into<String>,
        message: impl std::fmt::Display,
    ) -> StudyError {
        self.invalid(value.span(), field, message.to_string())
    }

    /// A duration field (`30s`, `200ms`), or `default` when the file leaves it out.
    pub(super) fn duration(
        &self,
        value: Option<&Spanned<String>>,
        field: &str,
        default: Duration,
    ) -> Result<Duration> {
        match value {
            None => Ok(default),
            Some(v) => parse_duration(v.get_ref()).map_err(|e| self.bad(v, field, e.to_string())),
        }
    }
}

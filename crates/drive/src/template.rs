//! Request body templates: `{{column}}` takes a value from a CSV row, `{{seq}}` a request
//! sequence number, `{{rand:A-B}}` a uniform integer, `{{randf:A-B}}` a uniform decimal.

use std::path::{Path, PathBuf};

use crate::error::{DriveError, invalid};
use perfpilot_stats::Rng;

/// Values for the template's `{{column}}` placeholders.
#[derive(Clone, Debug, Default)]
pub struct DataSource {
    /// Where the rows came from, for error messages.
    pub name: String,
    /// Column names.
    pub columns: Vec<String>,
    /// Rows, used in turn (request `i` uses row `i mod rows`).
    pub rows: Vec<Vec<String>>,
}

impl DataSource {
    /// Reads a CSV file with a header line.
    pub fn from_csv(path: &Path) -> Result<Self, DriveError> {
        let text = std::fs::read_to_string(path).map_err(|source| DriveError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_csv_text(&text, path)
    }

    /// Parses CSV text with a header line; `path` names it in errors.
    pub fn from_csv_text(text: &str, path: &Path) -> Result<Self, DriveError> {
        let csv_err = |source| DriveError::Csv {
            path: PathBuf::from(path),
            source,
        };
        let mut reader = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .from_reader(text.as_bytes());
        let columns = reader
            .headers()
            .map_err(csv_err)?
            .iter()
            .map(str::to_string)
            .collect();
        let mut rows = Vec::new();
        for rec in reader.records() {
            rows.push(rec.map_err(csv_err)?.iter().map(str::to_string).collect());
        }
        if rows.is_empty() {
            return Err(invalid(
                "CSV data",
                &path.display().to_string(),
                "has a header but no rows",
            ));
        }
        Ok(DataSource {
            name: path.display().to_string(),
            columns,
            rows,
        })
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Part {
    Literal(String),
    Column(usize),
    Seq,
    RandInt(i64, i64),
    RandFloat(f64, f64),
}

/// A compiled body template.
#[derive(Clone, Debug)]
pub struct BodyTemplate {
    parts: Vec<Part>,
    rows: Vec<Vec<String>>,
}

impl BodyTemplate {
    /// Compiles `text` against `data`; a placeholder naming a column `data` lacks is an error
    /// here, before any request is sent.
    pub fn compile(text: &str, data: Option<&DataSource>) -> Result<Self, DriveError> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find("{{") {
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_string()));
            }
            let after = &rest[open + 2..];
            let Some(close) = after.find("}}") else {
                return Err(invalid("body template", text, "a `{{` has no closing `}}`"));
            };
            let name = after[..close].trim();
            parts.push(Self::placeholder(name, data, text)?);
            rest = &after[close + 2..];
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_string()));
        }
        Ok(BodyTemplate {
            parts,
            rows: data.map(|d| d.rows.clone()).unwrap_or_default(),
        })
    }

    fn placeholder(name: &str, data: Option<&DataSource>, text: &str) -> Result<Part, DriveError> {
        if name == "seq" {
            return Ok(Part::Seq);
        }
        for (prefix, float) in [("rand:", false), ("randf:", true)] {
            if let Some(range) = name.strip_prefix(prefix) {
                let bad = || {
                    invalid(
                        "generator",
                        name,
                        "expected rand:A-B or randf:A-B with A <= B",
                    )
                };
                let (a, b) = split_range(range).ok_or_else(bad)?;
                return if float {
                    let (a, b) = (
                        a.parse::<f64>().map_err(|_| bad())?,
                        b.parse::<f64>().map_err(|_| bad())?,
                    );
                    if a <= b {
                        Ok(Part::RandFloat(a, b))
                    } else {
                        Err(bad())
                    }
                } else {
                    let (a, b) = (
                        a.parse::<i64>().map_err(|_| bad())?,
                        b.parse::<i64>().map_err(|_| bad())?,
                    );
                    if a <= b {
                        Ok(Part::RandInt(a, b))
                    } else {
                        Err(bad())
                    }
                };
            }
        }
        match data {
            Some(d) => match d.columns.iter().position(|c| c == name) {
                Some(i) => Ok(Part::Column(i)),
                None => Err(DriveError::MissingColumn {
                    column: name.to_string(),
                    source_name: d.name.clone(),
                    available: d.columns.join(", "),
                }),
            },
            None => Err(invalid(
                "body template",
                text,
                format!(
                    "placeholder {{{{{name}}}}} needs a CSV data file (--data FILE) or is a generator: seq, rand:A-B, randf:A-B"
                ),
            )),
        }
    }

    /// Renders the body of request number `seq`.
    pub fn render(&self, seq: u64, rng: &mut Rng) -> String {
        let mut out = String::new();
        let row = if self.rows.is_empty() {
            None
        } else {
            self.rows.get((seq % self.rows.len() as u64) as usize)
        };
        for p in &self.parts {
            match p {
                Part::Literal(s) => out.push_str(s),
                Part::Column(i) => {
                    if let Some(v) = row.and_then(|r| r.get(*i)) {
                        out.push_str(v);
                    }
                }
                Part::Seq => out.push_str(&seq.to_string()),
                Part::RandInt(a, b) => {
                    let span = (b - a) as u64 + 1;
                    out.push_str(&(a + (rng.next_u64() % span) as i64).to_string());
                }
                Part::RandFloat(a, b) => {
                    out.push_str(&format!("{:.3}", a + (b - a) * rng.next_f64()));
                }
            }
        }
        out
    }
}

fn split_range(s: &str) -> Option<(&str, &str)> {
    // Allow a leading minus on the lower bound: "-5-5".
    let start = usize::from(s.starts_with('-'));
    let dash = s[start..].find('-')? + start;
    Some((&s[..dash], &s[dash + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> DataSource {
        DataSource::from_csv_text("a,b\n1,x\n2,y\n", Path::new("t.csv")).unwrap()
    }

    #[test]
    fn renders_columns_in_turn_and_generators() {
        let t = BodyTemplate::compile(
            r#"{"a":{{a}},"b":"{{ b }}","n":{{seq}},"r":{{rand:5-5}}}"#,
            Some(&data()),
        )
        .unwrap();
        let mut rng = Rng::new(1);
        assert_eq!(t.render(0, &mut rng), r#"{"a":1,"b":"x","n":0,"r":5}"#);
        assert_eq!(t.render(1, &mut rng), r#"{"a":2,"b":"y","n":1,"r":5}"#);
        let f = BodyTemplate::compile("{{randf:1-2}}", None).unwrap();
        let v: f64 = f.render(0, &mut rng).parse().unwrap();
        assert!((1.0..=2.0).contains(&v));
    }

    #[test]
    fn missing_column_is_named() {
        let err = BodyTemplate::compile("{{nope}}", Some(&data()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"nope\"") && err.contains("a, b") && err.contains("t.csv"),
            "{err}"
        );
        let err = BodyTemplate::compile("{{nope}}", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--data"), "{err}");
        assert!(BodyTemplate::compile("{{a", Some(&data())).is_err());
        assert!(BodyTemplate::compile("{{rand:9-1}}", None).is_err());
    }

    #[test]
    fn empty_csv_is_an_error() {
        assert!(DataSource::from_csv_text("a,b\n", Path::new("e.csv")).is_err());
    }
}

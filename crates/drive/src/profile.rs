//! Request profiles (`drive --requests FILE.csv`): one CSV row per kind of request — its name,
//! relative weight, method, URL (whose path may draw `{{rand:A-B}}` and other generators per
//! request), body and headers. Each request of a run draws a kind by weight from its user's
//! seeded generator, so a mix such as 90 % GET, 5 % search, 5 % PUT runs in closed and open loop
//! alike, and the result counts each kind apart.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use perfpilot_stats::{Rng, WeightedChoice};

use crate::client::Target;
use crate::error::DriveError;
use crate::template::BodyTemplate;

/// The columns a profile must have.
pub const REQUIRED_COLUMNS: [&str; 4] = ["name", "weight", "method", "url"];

/// A column `header:NAME` sends header NAME with the cell's value (an empty cell sends none).
const HEADER_PREFIX: &str = "header:";

/// The largest generated body (`body_bytes`): a request profile drives load, it does not move
/// files.
const MAX_BODY_BYTES: u64 = 1 << 30;

/// What each column is, for the error that names an unknown one.
const COLUMNS_HELP: &str =
    "name, weight, method, url, and optionally body_bytes, body_file, header:NAME";

/// The methods a profile row may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// GET.
    Get,
    /// HEAD (the response has no body to read).
    Head,
    /// PUT, usually with a body.
    Put,
    /// POST, usually with a body.
    Post,
    /// DELETE.
    Delete,
}

impl Method {
    /// Parses a method name, in any case.
    pub fn parse(s: &str) -> Option<Method> {
        Some(match s.to_ascii_uppercase().as_str() {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "PUT" => Method::Put,
            "POST" => Method::Post,
            "DELETE" => Method::Delete,
            _ => return None,
        })
    }

    /// The method as sent.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Put => "PUT",
            Method::Post => "POST",
            Method::Delete => "DELETE",
        }
    }

    /// Whether a request of this method may carry a body.
    fn takes_body(self) -> bool {
        matches!(self, Method::Put | Method::Post)
    }
}

/// One row of a profile: a kind of request.
#[derive(Clone, Debug)]
pub struct RequestKind {
    /// Its name, unique in the profile; the result counts each name apart.
    pub name: String,
    /// Relative frequency (> 0).
    pub weight: f64,
    /// The method.
    pub method: Method,
    /// The URL as written (joined to the base URL when the row gives a path).
    pub url: String,
    /// Headers of this kind (after the command line's).
    pub headers: Vec<(String, String)>,
    /// The body sent with each request of this kind.
    pub body: Option<Bytes>,
    /// The line of the file it came from.
    pub line: u64,
    /// The path and query, with generators rendered per request.
    path: BodyTemplate,
}

/// A parsed request profile.
#[derive(Clone, Debug)]
pub struct RequestProfile {
    /// The file it came from.
    pub source: PathBuf,
    /// `scheme://host:port` every row goes to (one connection per user serves them all).
    pub origin: String,
    /// The rows, in file order.
    pub kinds: Vec<RequestKind>,
    choice: WeightedChoice,
}

impl RequestProfile {
    /// Reads a profile from `path`; a row whose url is a path is joined to `base`.
    pub fn from_csv(path: &Path, base: Option<&str>) -> Result<Self, DriveError> {
        let text = std::fs::read_to_string(path).map_err(|e| DriveError::Profile {
            path: path.to_path_buf(),
            line: 0,
            field: "file".to_string(),
            reason: format!(
                "cannot read it: {e} (give --requests a CSV file with the header line {})",
                REQUIRED_COLUMNS.join(",")
            ),
        })?;
        Self::parse(&text, path, base)
    }

    /// Parses profile text; `path` names it in errors and a `body_file` is relative to its
    /// directory.
    pub fn parse(text: &str, path: &Path, base: Option<&str>) -> Result<Self, DriveError> {
        let err = |line: u64, field: &str, reason: String| DriveError::Profile {
            path: path.to_path_buf(),
            line,
            field: field.to_string(),
            reason,
        };
        // Comment lines are blanked, and lines counted from byte offsets: the CSV reader's
        // own line numbers skip blank lines.
        let text = blank_comments(text);
        let line_at = |pos: Option<&csv::Position>| line_of(&text, pos);
        let mut reader = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .from_reader(text.as_bytes());
        let csv_err = |e: csv::Error| {
            let line = line_at(e.position());
            err(
                line,
                "row",
                format!("{e} (every row needs as many fields as the header)"),
            )
        };
        let header: Vec<String> = reader
            .headers()
            .map_err(csv_err)?
            .iter()
            .map(|c| c.to_ascii_lowercase())
            .collect();
        let cols = Columns::read(&header, &err)?;
        let base = base.map(|b| b.trim_end_matches('/'));
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut rows = Rows::default();
        for rec in reader.records() {
            let rec = rec.map_err(csv_err)?;
            let line = line_at(rec.position());
            rows.add(parse_row(&rec, &cols, line, base, dir, &err)?, line, &err)?;
        }
        let (origin, kinds) = rows.finish(base, &err)?;
        let weights: Vec<f64> = kinds.iter().map(|k| k.weight).collect();
        let choice = WeightedChoice::new(&weights)
            .ok_or_else(|| err(0, "weight", "the weights must be positive".to_string()))?;
        Ok(RequestProfile {
            source: path.to_path_buf(),
            origin,
            kinds,
            choice,
        })
    }

    /// Draws the kind of request number `seq` and renders its path and query.
    pub(crate) fn draw(&self, seq: u64, rng: &mut Rng) -> (usize, String) {
        let i = self.choice.draw(rng);
        (i, self.kinds[i].path.render(seq, rng))
    }

    /// The share of requests of kind `i` (its weight over the sum).
    pub fn share(&self, i: usize) -> f64 {
        self.choice.probability(i)
    }
}

/// The profile's text with comment lines (`#`) blanked, so that lines keep their numbers.
fn blank_comments(text: &str) -> String {
    text.lines()
        .map(|l| {
            if l.trim_start().starts_with('#') {
                ""
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The line (from 1) of a CSV record or error at `pos`, counted from its byte offset: a
/// record's offset is where the reader started looking for it, before the blank lines it
/// skipped, so those are skipped here too. 0 when there is no position.
fn line_of(text: &str, pos: Option<&csv::Position>) -> u64 {
    pos.map_or(0, |p| {
        let bytes = text.as_bytes();
        let mut at = (p.byte() as usize).min(bytes.len());
        while bytes.get(at).is_some_and(|b| *b == b'\n' || *b == b'\r') {
            at += 1;
        }
        1 + bytes[..at.min(bytes.len())]
            .iter()
            .filter(|b| **b == b'\n')
            .count() as u64
    })
}

/// The error of a field at a line (the profile's path is in it).
type FieldErr<'a> = &'a dyn Fn(u64, &str, String) -> DriveError;

/// Where each column is.
struct Columns {
    name: usize,
    weight: usize,
    method: usize,
    url: usize,
    body_bytes: Option<usize>,
    body_file: Option<usize>,
    headers: Vec<(usize, String)>,
}

impl Columns {
    /// The columns of the header line (lower-cased): the required ones must be there, every
    /// other one must be known or name a request header.
    fn read(header: &[String], err: FieldErr) -> Result<Columns, DriveError> {
        let col = |name: &str| header.iter().position(|c| c == name);
        let missing: Vec<&str> = REQUIRED_COLUMNS
            .into_iter()
            .filter(|c| col(c).is_none())
            .collect();
        if !missing.is_empty() {
            return Err(err(
                1,
                "header",
                format!(
                    "missing column{} {}: the header line must name at least {}",
                    if missing.len() == 1 { "" } else { "s" },
                    missing.join(", "),
                    REQUIRED_COLUMNS.join(",")
                ),
            ));
        }
        let mut headers = Vec::new();
        for (i, c) in header.iter().enumerate() {
            if let Some(name) = c.strip_prefix(HEADER_PREFIX) {
                let name = name.trim();
                if let Err(reason) = check_header_name(name) {
                    return Err(err(1, c, reason));
                }
                headers.push((i, name.to_string()));
            } else if !REQUIRED_COLUMNS.contains(&c.as_str())
                && c != "body_bytes"
                && c != "body_file"
            {
                return Err(err(
                    1,
                    "header",
                    format!("unknown column {c:?}: the columns are {COLUMNS_HELP}"),
                ));
            }
        }
        Ok(Columns {
            name: col("name").unwrap_or(0),
            weight: col("weight").unwrap_or(0),
            method: col("method").unwrap_or(0),
            url: col("url").unwrap_or(0),
            body_bytes: col("body_bytes"),
            body_file: col("body_file"),
            headers,
        })
    }
}

/// The rows read so far: their names (each once) and the origin they all go to.
#[derive(Default)]
struct Rows {
    kinds: Vec<RequestKind>,
    names: BTreeSet<String>,
    /// The origin and the line of the first row.
    origin: Option<(String, u64)>,
    /// Some row gave a path, joined to the base URL.
    any_path: bool,
}

impl Rows {
    /// Adds the row of `line`: its name must be new, its origin the first row's.
    fn add(&mut self, row: Row, line: u64, err: FieldErr) -> Result<(), DriveError> {
        self.any_path |= row.relative;
        let kind = row.kind;
        if !self.names.insert(kind.name.clone()) {
            return Err(err(
                line,
                "name",
                format!(
                    "{:?} is already the name of another row: give each row its own name",
                    kind.name
                ),
            ));
        }
        match &self.origin {
            None => self.origin = Some((row.origin, line)),
            Some((first, first_line)) if *first != row.origin => {
                return Err(err(
                    line,
                    "url",
                    format!(
                        "goes to {} but line {first_line} goes to {first}: every row must go to \
                         the same scheme, host and port (each user keeps one connection); run \
                         one drive per server",
                        row.origin
                    ),
                ));
            }
            Some(_) => {}
        }
        self.kinds.push(kind);
        Ok(())
    }

    /// The origin and the rows, once there is a row and the base URL (if given) was used.
    fn finish(
        self,
        base: Option<&str>,
        err: FieldErr,
    ) -> Result<(String, Vec<RequestKind>), DriveError> {
        let Some((origin, _)) = self.origin else {
            return Err(err(
                0,
                "file",
                format!(
                    "has no rows: add one row per kind of request under the header (e.g. \
                     {}\\nget,90,GET,/docs/doc-{{{{rand:1-1000}}}})",
                    REQUIRED_COLUMNS.join(",")
                ),
            ));
        };
        if let Some(b) = base
            && !self.any_path
        {
            return Err(err(
                0,
                "file",
                format!(
                    "every row has an absolute url, so the URL {b} on the command line would not \
                     be used: drop it, or write the rows' urls as paths (/docs/…) to join to it"
                ),
            ));
        }
        Ok((origin, self.kinds))
    }
}

/// A parsed row with where it goes.
struct Row {
    kind: RequestKind,
    origin: String,
    /// The row gave a path, joined to the base URL.
    relative: bool,
}

/// Parses the row of `line`.
fn parse_row(
    rec: &csv::StringRecord,
    cols: &Columns,
    line: u64,
    base: Option<&str>,
    dir: &Path,
    err: FieldErr,
) -> Result<Row, DriveError> {
    let cell = |i: usize| rec.get(i).unwrap_or("");
    let name = cell(cols.name).to_string();
    if name.is_empty() {
        return Err(err(
            line,
            "name",
            "is empty: name each row (it labels the row's figures)".to_string(),
        ));
    }
    let weight = weight(cell(cols.weight), line, err)?;
    let m = cell(cols.method);
    let method = Method::parse(m).ok_or_else(|| {
        err(
            line,
            "method",
            format!("unknown method {m:?}: use GET, HEAD, PUT, POST or DELETE"),
        )
    })?;
    let (url, relative) = resolve_url(cell(cols.url), base, line, err)?;
    let (origin, template) = url_template(&url, line, err)?;
    let body = body(rec, cols, line, method, dir, err)?;
    let headers = row_headers(rec, cols, line, err)?;
    Ok(Row {
        kind: RequestKind {
            name,
            weight,
            method,
            url,
            headers,
            body,
            line,
            path: template,
        },
        origin,
        relative,
    })
}

/// A row's weight: a finite number above 0.
fn weight(w: &str, line: u64, err: FieldErr) -> Result<f64, DriveError> {
    match w.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(_) => Err(err(
            line,
            "weight",
            format!(
                "{w} is not positive: give a relative frequency > 0 (drop the row to send none)"
            ),
        )),
        Err(_) => Err(err(
            line,
            "weight",
            format!("{w:?} is not a number: give a relative frequency such as 90 or 0.05"),
        )),
    }
}

/// The URL a row's `url` cell means: itself when absolute, else a path joined to `base`; and
/// whether it was a path.
fn resolve_url(
    written: &str,
    base: Option<&str>,
    line: u64,
    err: FieldErr,
) -> Result<(String, bool), DriveError> {
    if written.starts_with("http://") || written.starts_with("https://") {
        Ok((written.to_string(), false))
    } else if written.starts_with('/') {
        let Some(b) = base else {
            return Err(err(
                line,
                "url",
                format!(
                    "{written} is a path but no base URL was given: add it on the command line \
                     (perfpilot drive --requests FILE http://HOST:PORT) or write the absolute URL"
                ),
            ));
        };
        Ok((format!("{b}{written}"), true))
    } else {
        Err(err(
            line,
            "url",
            format!("{written:?} is neither an absolute URL (http://…) nor a path (/…)"),
        ))
    }
}

/// A URL's origin and its path and query as a template of generators (placeholders only in
/// the path and query); one rendering is checked to be a target that can be sent to.
fn url_template(url: &str, line: u64, err: FieldErr) -> Result<(String, BodyTemplate), DriveError> {
    let (origin, path) = split_url(url);
    if origin.contains("{{") {
        return Err(err(
            line,
            "url",
            format!("{url}: placeholders may stand only in the path and query, not in the host"),
        ));
    }
    let template = BodyTemplate::compile(&path, None).map_err(|e| {
        let why = match e {
            DriveError::Invalid { reason, value, .. } => format!("{value:?} {reason}"),
            other => other.to_string(),
        };
        err(
            line,
            "url",
            format!(
                "bad placeholder: {why}; a url draws {{{{rand:A-B}}}} (a whole number), \
                 {{{{randf:A-B}}}} or {{{{seq}}}} per request"
            ),
        )
    })?;
    // One rendering checks the host resolves and the path is sendable.
    let sample = template.render(0, &mut Rng::new(0));
    Target::parse(&format!("{origin}{sample}")).map_err(|e| err(line, "url", e.to_string()))?;
    Ok((origin, template))
}

/// A row's request headers: the non-empty `header:NAME` cells, without line breaks.
fn row_headers(
    rec: &csv::StringRecord,
    cols: &Columns,
    line: u64,
    err: FieldErr,
) -> Result<Vec<(String, String)>, DriveError> {
    let mut headers = Vec::new();
    for (i, h) in &cols.headers {
        let v = rec.get(*i).unwrap_or("");
        if v.is_empty() {
            continue;
        }
        if v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            return Err(err(
                line,
                &format!("{HEADER_PREFIX}{h}"),
                "contains a line break".to_string(),
            ));
        }
        headers.push((h.clone(), v.to_string()));
    }
    Ok(headers)
}

/// The row's body: `body_bytes` generated bytes or the contents of `body_file`.
fn body(
    rec: &csv::StringRecord,
    cols: &Columns,
    line: u64,
    method: Method,
    dir: &Path,
    err: FieldErr,
) -> Result<Option<Bytes>, DriveError> {
    let cell = |i: Option<usize>| i.and_then(|i| rec.get(i)).unwrap_or("");
    let (size, file) = (cell(cols.body_bytes), cell(cols.body_file));
    let body = match (size.is_empty(), file.is_empty()) {
        (true, true) => return Ok(None),
        (false, false) => {
            return Err(err(
                line,
                "body_bytes",
                "and body_file are both set: give one of them".to_string(),
            ));
        }
        (false, true) => {
            let n = size.parse::<u64>().ok().filter(|n| *n <= MAX_BODY_BYTES);
            let n = n.ok_or_else(|| {
                err(
                    line,
                    "body_bytes",
                    format!("{size:?} is not a whole number of bytes up to {MAX_BODY_BYTES}"),
                )
            })?;
            generated_body(n as usize)
        }
        (true, false) => {
            let p = dir.join(file);
            Bytes::from(std::fs::read(&p).map_err(|e| {
                err(
                    line,
                    "body_file",
                    format!(
                        "cannot read {}: {e} (a relative body_file is taken from the profile's \
                         directory)",
                        p.display()
                    ),
                )
            })?)
        }
    };
    if !method.takes_body() {
        let field = if size.is_empty() {
            "body_file"
        } else {
            "body_bytes"
        };
        return Err(err(
            line,
            field,
            format!(
                "a {} request sends no body: use PUT or POST, or leave it empty",
                method.as_str()
            ),
        ));
    }
    Ok(Some(body))
}

/// `n` bytes of printable text: the same body for every request of the row, built once.
fn generated_body(n: usize) -> Bytes {
    const PATTERN: &[u8] = b"perfpilot request body 0123456789 abcdefghijklmnopqrstuvwxyz\n";
    PATTERN.iter().copied().cycle().take(n).collect()
}

/// `scheme://authority` and the path with its query (`/` when there is none).
fn split_url(url: &str) -> (String, String) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find(['/', '?']) {
        Some(i) => {
            let (o, p) = url.split_at(after_scheme + i);
            let p = if p.starts_with('?') {
                format!("/{p}")
            } else {
                p.to_string()
            };
            (o.to_string(), p)
        }
        None => (url.to_string(), "/".to_string()),
    }
}

/// A header a row may set: a token the driver does not set itself.
fn check_header_name(name: &str) -> Result<(), String> {
    if !crate::request::is_token(name) {
        return Err(format!("{name:?} is not a valid header name"));
    }
    if name.eq_ignore_ascii_case("content-length") || name.eq_ignore_ascii_case("host") {
        return Err(format!("{name} is set by the driver"));
    }
    Ok(())
}

#[cfg(test)]
mod tests;

//! The parts of a request the store reads: the query string's fields, the metadata of an
//! ingest (query fields and `x-meta-*` headers) and a page's `after` and `limit`.

use std::collections::BTreeMap;

use hyper::HeaderMap;
use percent_encoding::percent_decode_str;

use crate::error::StoreError;

/// The longest metadata key, bytes.
pub const MAX_KEY_LEN: usize = 64;
/// The longest metadata value, bytes.
pub const MAX_VALUE_LEN: usize = 1024;
/// The most documents one page holds.
pub const MAX_PAGE: usize = 1000;
/// A page's size when `limit` is left out.
pub const DEFAULT_PAGE: usize = 100;
/// The header prefix of a metadata field on ingest (`x-meta-author: Ann`).
pub const META_HEADER: &str = "x-meta-";

/// The query string's `name=value` fields, percent-decoded (`+` is a space), in order.
pub fn fields(query: Option<&str>) -> Result<Vec<(String, String)>, StoreError> {
    let Some(q) = query else {
        return Ok(Vec::new());
    };
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((decode(k)?, decode(v)?))
        })
        .collect()
}

fn decode(s: &str) -> Result<String, StoreError> {
    let spaced = s.replace('+', " ");
    percent_decode_str(&spaced)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| {
            StoreError::BadRequest(format!(
                "query field {s:?} is not UTF-8 once percent-decoded"
            ))
        })
}

/// Checks a metadata key and value against the limits and the key's alphabet.
fn check_field(key: &str, value: &str) -> Result<(), StoreError> {
    let key_ok = !key.is_empty()
        && key.len() <= MAX_KEY_LEN
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if !key_ok {
        return Err(StoreError::BadRequest(format!(
            "metadata key {key:?}: use 1 to {MAX_KEY_LEN} letters, digits, '_', '-' or '.'"
        )));
    }
    if value.len() > MAX_VALUE_LEN {
        return Err(StoreError::BadRequest(format!(
            "metadata {key}: the value is {} bytes, at most {MAX_VALUE_LEN} are kept",
            value.len()
        )));
    }
    Ok(())
}

/// The metadata of an ingest: every query field and every `x-meta-KEY` header (keys are
/// lower-cased, as HTTP header names are case-insensitive). A key given twice is an error.
pub fn metadata(
    query: Option<&str>,
    headers: &HeaderMap,
) -> Result<BTreeMap<String, String>, StoreError> {
    let mut meta = BTreeMap::new();
    let mut add = |k: String, v: String| {
        check_field(&k, &v)?;
        if meta.contains_key(&k) {
            return Err(StoreError::BadRequest(format!(
                "metadata {k} is given twice (query fields and x-meta-* headers together): give it once"
            )));
        }
        meta.insert(k, v);
        Ok(())
    };
    for (k, v) in fields(query)? {
        add(k.to_ascii_lowercase(), v)?;
    }
    for (name, value) in headers {
        if let Some(key) = name.as_str().strip_prefix(META_HEADER) {
            let v = value.to_str().map_err(|_| {
                StoreError::BadRequest(format!(
                    "header {name}: the value is not visible ASCII; percent-encode it in a query field instead"
                ))
            })?;
            add(key.to_string(), v.to_string())?;
        }
    }
    Ok(meta)
}

/// A page request and the fields besides `after` and `limit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    /// The last id of the previous page (empty: from the start).
    pub after: String,
    /// How many documents at most.
    pub limit: usize,
    /// The other fields, checked as metadata (a search's filters).
    pub filters: Vec<(String, String)>,
}

/// A page request: `after` (an id, default before all) and `limit` (1 to [`MAX_PAGE`]),
/// taken out of `fields`; the rest are a search's filters.
pub fn page(fields: Vec<(String, String)>) -> Result<PageRequest, StoreError> {
    let (mut after, mut limit, mut rest) = (String::new(), DEFAULT_PAGE, Vec::new());
    for (k, v) in fields {
        match k.as_str() {
            "after" => after = v,
            "limit" => {
                limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_PAGE).contains(n))
                    .ok_or_else(|| {
                        StoreError::BadRequest(format!(
                            "limit={v:?}: give a whole number from 1 to {MAX_PAGE}"
                        ))
                    })?;
            }
            _ => {
                check_field(&k, &v)?;
                rest.push((k, v));
            }
        }
    }
    Ok(PageRequest {
        after,
        limit,
        filters: rest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    #[test]
    fn query_fields_are_percent_decoded_with_plus_as_space() {
        let f = fields(Some("author=Ann+Lee&title=Q3%20report&flag&&x=%C3%A9")).unwrap();
        assert_eq!(
            f,
            [
                ("author".into(), "Ann Lee".into()),
                ("title".into(), "Q3 report".into()),
                ("flag".into(), String::new()),
                ("x".into(), "é".into())
            ]
        );
        let e = fields(Some("x=%FF")).unwrap_err();
        assert!(e.to_string().contains("not UTF-8"), "{e}");
    }

    #[test]
    fn metadata_comes_from_query_fields_and_meta_headers() {
        let mut h = HeaderMap::new();
        h.insert("x-meta-dept", HeaderValue::from_static("hr"));
        h.insert("content-type", HeaderValue::from_static("text/plain"));
        let m = metadata(Some("Author=Ann"), &h).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m["author"], "Ann");
        assert_eq!(m["dept"], "hr");

        let e = metadata(Some("dept=sales"), &h).unwrap_err();
        assert!(e.to_string().contains("given twice"), "{e}");
        let e = metadata(Some("bad%20key=1"), &HeaderMap::new()).unwrap_err();
        assert!(e.to_string().contains("metadata key \"bad key\""), "{e}");
        let long = format!("k={}", "v".repeat(MAX_VALUE_LEN + 1));
        let e = metadata(Some(&long), &HeaderMap::new()).unwrap_err();
        assert!(e.to_string().contains("at most 1024"), "{e}");
    }

    #[test]
    fn page_takes_after_and_limit_and_refuses_a_bad_limit() {
        let p = page(fields(Some("dept=hr&limit=5&after=d3")).unwrap()).unwrap();
        assert_eq!((p.after.as_str(), p.limit), ("d3", 5));
        assert_eq!(p.filters, [("dept".to_string(), "hr".to_string())]);
        assert_eq!(page(Vec::new()).unwrap().limit, DEFAULT_PAGE);
        for bad in ["0", "1001", "ten", "-1"] {
            let e = page(vec![("limit".into(), bad.into())]).unwrap_err();
            assert!(e.to_string().contains("from 1 to 1000"), "{e}");
        }
    }
}

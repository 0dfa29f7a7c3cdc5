//! The per-second series of a measurement as CSV, for spreadsheets and plotting tools.

use crate::error::DriveError;
use crate::measurement::Measurement;

/// The header of [`series_csv`].
pub const SERIES_CSV_HEADER: [&str; 10] = [
    "t_s",
    "time",
    "requests",
    "ok",
    "errors",
    "throughput_rps",
    "mean_ms",
    "p50_ms",
    "p99_ms",
    "max_ms",
];

/// One line per second of the measured window: its start as seconds since the window began and
/// as RFC 3339, counts, the ok responses of that second, and latencies in ms (empty when the
/// second had none).
pub fn series_csv(m: &Measurement) -> Result<String, DriveError> {
    let start = humantime::parse_rfc3339_weak(m.start.trim_end_matches('Z')).ok();
    let mut w = csv::Writer::from_writer(Vec::new());
    let csv_err = |e: csv::Error| DriveError::Decode {
        what: "series CSV".to_string(),
        reason: e.to_string(),
    };
    w.write_record(SERIES_CSV_HEADER).map_err(csv_err)?;
    let opt = |v: Option<f64>| v.map(|x| format!("{x:.3}")).unwrap_or_default();
    for p in &m.series {
        let time = start
            .map(|s| {
                humantime::format_rfc3339_millis(s + std::time::Duration::from_secs(p.t_s))
                    .to_string()
            })
            .unwrap_or_default();
        w.write_record([
            p.t_s.to_string(),
            time,
            p.requests.to_string(),
            p.ok.to_string(),
            p.errors.to_string(),
            p.ok.to_string(),
            opt(p.mean_ms),
            opt(p.p50_ms),
            opt(p.p99_ms),
            opt(p.max_ms),
        ])
        .map_err(csv_err)?;
    }
    let bytes = w.into_inner().map_err(|e| DriveError::Decode {
        what: "series CSV".to_string(),
        reason: e.to_string(),
    })?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measurement::{LoadShape, SeriesPoint};

    #[test]
    fn the_series_csv_has_one_row_per_second_with_its_wall_time_and_reads_back() {
        let mut m = Measurement::empty(
            "perfpilot-drive",
            LoadShape::Closed {
                users: 1,
                think_time: "0".into(),
            },
        );
        m.start = "2026-01-01T00:00:00.000Z".into();
        m.series = vec![
            SeriesPoint {
                t_s: 0,
                requests: 10,
                ok: 9,
                errors: 1,
                mean_ms: Some(1.5),
                p99_ms: Some(3.0),
                ..Default::default()
            },
            SeriesPoint {
                t_s: 1,
                ..Default::default()
            },
        ];
        let text = series_csv(&m).unwrap();
        let mut r = csv::Reader::from_reader(text.as_bytes());
        assert_eq!(
            r.headers().unwrap().iter().collect::<Vec<_>>(),
            SERIES_CSV_HEADER
        );
        let rows: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
        assert_eq!(rows.len(), 2);
        assert_eq!(&rows[0][1], "2026-01-01T00:00:00.000Z");
        assert_eq!(&rows[1][1], "2026-01-01T00:00:01.000Z");
        assert_eq!((&rows[0][3], &rows[0][8]), ("9", "3.000"));
        assert_eq!(&rows[1][6], "");
    }
}

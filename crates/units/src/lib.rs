//! How perfpilot shows quantities to people: one style for durations, sizes, rates, counts and
//! percentages, so that the same figure reads the same in every command's output.
//!
//! The style, everywhere:
//!
//! - **Three significant digits, trailing zeros dropped**: `810 µs`, `1.25 ms`, `3.2 s`,
//!   `41.2 MiB`, `12.3 req/s`. From 100 up a figure is a whole number (`953 MiB`, `1,234 req/s`):
//!   digits are never dropped left of the decimal point.
//! - **A space between a number and its unit** (`4 GiB`, `0.04 %`), **thousands grouped with
//!   commas** (`1,234,567`).
//! - **Durations** under a minute in `ns`, `µs`, `ms` or `s`; from a minute up in the two largest
//!   whole units of `days`, `h`, `min`, `s` (`1 min 30 s`, `2 h 5 min`, `7 days`).
//! - **Sizes** in binary units (`B`, `KiB`, `MiB`, `GiB`, `TiB`, `PiB`, `EiB`), and byte rates
//!   in the same units per second (`12.3 MiB/s`).
//! - **Rates** of things per second with the thing's name: `1,234 req/s`, or `1,234/s`.
//!
//! [`MarkdownTable`] lays figures out in the tables reports write.
//!
//! [`decimal`] is the one exception, for files people open in a spreadsheet (CSV): no unit, no
//! grouping, four significant digits and every integer digit kept.

use std::time::Duration;

mod table;
pub use table::MarkdownTable;

/// The largest number of decimals shown, so that a tiny value ends instead of running on.
const MAX_DECIMALS: usize = 12;

/// Decimals that give `significant` digits to `a` (positive), none from `10^(significant-1)` up.
fn decimals_for(a: f64, significant: i32) -> usize {
    if a == 0.0 || !a.is_finite() {
        return 0;
    }
    let magnitude = a.log10().floor() as i32;
    ((significant - 1 - magnitude).max(0) as usize).min(MAX_DECIMALS)
}

/// `x` with `decimals` decimals, trailing zeros (and a bare point) dropped, `-0` as `0`.
fn fixed_trimmed(x: f64, decimals: usize) -> String {
    let mut s = format!("{x:.decimals$}");
    if s.contains('.') {
        let kept = s.trim_end_matches('0').trim_end_matches('.').len();
        s.truncate(kept);
    }
    if s == "-0" { "0".to_string() } else { s }
}

/// Groups the integer digits of a plain decimal (`-1234.5` → `-1,234.5`).
fn group(plain: &str) -> String {
    let (sign, rest) = match plain.strip_prefix('-') {
        Some(r) => ("-", r),
        None => ("", plain),
    };
    let (int, frac) = match rest.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (rest, None),
    };
    if !int.bytes().all(|b| b.is_ascii_digit()) {
        return plain.to_string();
    }
    let mut out = String::from(sign);
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if let Some(f) = frac {
        out.push('.');
        out.push_str(f);
    }
    out
}

/// A number for people: three significant digits (whole from 100 up), trailing zeros dropped,
/// thousands grouped: `0.0412`, `3.2`, `41.2`, `953`, `1,234,568`.
pub fn number(x: f64) -> String {
    if !x.is_finite() {
        return x.to_string();
    }
    group(&fixed_trimmed(x, decimals_for(x.abs(), 3)))
}

/// A number for files (CSV): four significant digits with every integer digit kept, trailing
/// zeros dropped, no grouping and no unit: `12.35`, `0.01235`, `12346`.
pub fn decimal(x: f64) -> String {
    if !x.is_finite() {
        return x.to_string();
    }
    fixed_trimmed(x, decimals_for(x.abs(), 4))
}

/// A count, grouped: `1,234,567`.
pub fn count(n: u64) -> String {
    group(&n.to_string())
}

/// A count of things with the right noun: `1 step`, `8 steps`, `1,234 requests`.
pub fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", count(n), if n == 1 { one } else { many })
}

/// A percentage, `p` already in percent: `0.0374 %`, `12.3 %`, `100 %`.
pub fn percent(p: f64) -> String {
    format!("{} %", number(p))
}

/// `value` in the largest of `units` (ascending, each with its size in the first unit) that it
/// reaches, moving up a unit when rounding reaches the next one (`1023.9 KiB` is `1 MiB`).
fn scaled(value: f64, units: &[(&str, f64)]) -> String {
    let a = value.abs();
    let mut i = units.iter().rposition(|&(_, size)| a >= size).unwrap_or(0);
    loop {
        let (name, size) = units[i];
        let v = value / size;
        let shown = fixed_trimmed(v, decimals_for(v.abs(), 3));
        // Unit sizes are whole multiples of each other (1000, 1024): compare in this unit.
        let shown_abs: f64 = shown.trim_start_matches('-').parse().unwrap_or(0.0);
        let next_reached = units
            .get(i + 1)
            .is_some_and(|&(_, next)| shown_abs >= (next / size).round());
        if next_reached {
            i += 1;
            continue;
        }
        return format!("{} {name}", group(&shown));
    }
}

/// Units of a duration under a minute, in seconds.
const SHORT_TIME: [(&str, f64); 4] = [("ns", 1e-9), ("µs", 1e-6), ("ms", 1e-3), ("s", 1.0)];

/// Whole units of a duration from a minute up, in seconds, largest first.
const LONG_TIME: [(&str, &str, u64); 4] = [
    ("day", "days", 86_400),
    ("h", "h", 3_600),
    ("min", "min", 60),
    ("s", "s", 1),
];

/// A duration in seconds: `810 µs`, `1.25 ms`, `3.2 s`, `1 min 30 s`, `7 days`. Zero is `0 s`.
pub fn duration_secs(s: f64) -> String {
    if !s.is_finite() {
        return format!("{s} s");
    }
    if s == 0.0 {
        return "0 s".to_string();
    }
    if s < 0.0 {
        return format!("-{}", duration_secs(-s));
    }
    // Shown as `60 s` in three digits from 59.95 on: the long form from there.
    if s < 59.95 {
        return scaled(s, &SHORT_TIME);
    }
    let total = s.round() as u64;
    let Some(top) = LONG_TIME.iter().position(|&(_, _, size)| total >= size) else {
        return format!("{total} s");
    };
    let name = |i: usize, n: u64| {
        let (one, many, _) = LONG_TIME[i];
        format!("{n} {}", if n == 1 { one } else { many })
    };
    let Some(&(_, _, small)) = LONG_TIME.get(top + 1) else {
        return name(top, total);
    };
    // Rounded to the smaller of the two units shown.
    let in_small = (total as f64 / small as f64).round() as u64;
    let per = LONG_TIME[top].2 / small;
    let (big, rest) = (in_small / per, in_small % per);
    if rest == 0 {
        name(top, big)
    } else {
        format!("{} {}", name(top, big), name(top + 1, rest))
    }
}

/// A duration in milliseconds (how latencies are kept): `0.81` → `810 µs`.
pub fn duration_ms(ms: f64) -> String {
    duration_secs(ms / 1000.0)
}

/// A duration: `Duration::from_secs(7 * 86_400)` → `7 days`.
pub fn duration(d: Duration) -> String {
    duration_secs(d.as_secs_f64())
}

/// A duration on a clock's terms, for elapsed and remaining times and plans: `8s`, `3m33s`,
/// `1h05m` (whole seconds, the two largest units).
pub fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, s % 3600 / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// Binary size units, in bytes.
const SIZE: [(&str, f64); 7] = [
    ("B", 1.0),
    ("KiB", 1024.0),
    ("MiB", 1_048_576.0),
    ("GiB", 1_073_741_824.0),
    ("TiB", 1_099_511_627_776.0),
    ("PiB", 1_125_899_906_842_624.0),
    ("EiB", 1_152_921_504_606_846_976.0),
];

/// A size in bytes: `512 B`, `41.2 MiB`, `4 GiB`.
pub fn bytes(n: u64) -> String {
    if n < 1024 {
        return format!("{} B", count(n));
    }
    scaled(n as f64, &SIZE)
}

/// A size given as a float (as external tools report it): `43232788.48` → `41.2 MiB`.
pub fn bytes_f64(n: f64) -> String {
    if !n.is_finite() {
        return format!("{n} B");
    }
    scaled(n, &SIZE)
}

/// A byte rate: `12.3 MiB/s`.
pub fn bytes_per_s(per_s: f64) -> String {
    format!("{}/s", bytes_f64(per_s))
}

/// A rate of things per second: `rate(1234.4, "req")` → `1,234 req/s`; `rate(x, "")` → `1,234/s`.
pub fn rate(per_s: f64, what: &str) -> String {
    if what.is_empty() {
        format!("{}/s", number(per_s))
    } else {
        format!("{} {what}/s", number(per_s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_three_significant_digits_and_every_integer_digit() {
        assert_eq!(number(0.0), "0");
        assert_eq!(number(3.2), "3.2");
        assert_eq!(number(4.56789), "4.57");
        assert_eq!(number(41.234), "41.2");
        assert_eq!(number(953.67), "954");
        assert_eq!(number(1_234_567.8), "1,234,568");
        assert_eq!(number(0.041_234), "0.0412");
        assert_eq!(number(-1234.4), "-1,234");
        assert_eq!(number(-0.0001), "-0.0001");
        // Rounding that carries into the next digit keeps three significant digits.
        assert_eq!(number(9.996), "10");
        assert_eq!(number(0.099_96), "0.1");
        assert_eq!(number(f64::NAN), "NaN");
    }

    #[test]
    fn decimals_for_files_keep_four_significant_digits_without_grouping() {
        assert_eq!(decimal(12.345_678), "12.35");
        assert_eq!(decimal(0.012_345_6), "0.01235");
        assert_eq!(decimal(12_345.678), "12346");
        assert_eq!(decimal(99.999_999_999_999_99), "100");
        assert_eq!(decimal(0.0), "0");
        assert_eq!(decimal(1e-20), "0");
    }

    #[test]
    fn counts_are_grouped_and_take_the_right_noun() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(counted(1, "step", "steps"), "1 step");
        assert_eq!(counted(8, "step", "steps"), "8 steps");
        assert_eq!(counted(0, "step", "steps"), "0 steps");
    }

    #[test]
    fn short_durations_take_the_largest_unit_they_reach() {
        assert_eq!(duration_ms(0.81), "810 µs");
        assert_eq!(duration_ms(1.25), "1.25 ms");
        assert_eq!(duration_ms(810.0), "810 ms");
        assert_eq!(duration_secs(3.2), "3.2 s");
        assert_eq!(duration_secs(0.000_000_5), "500 ns");
        assert_eq!(duration_secs(0.000_000_000_5), "0.5 ns");
        assert_eq!(duration_secs(0.0), "0 s");
        assert_eq!(duration_secs(59.9), "59.9 s");
        // 999.7 µs rounds to 1000 µs: shown in the next unit.
        assert_eq!(duration_ms(0.9997), "1 ms");
        assert_eq!(duration_secs(-0.002), "-2 ms");
        assert_eq!(duration(Duration::from_micros(84)), "84 µs");
    }

    #[test]
    fn long_durations_take_the_two_largest_whole_units() {
        assert_eq!(duration_secs(59.97), "1 min");
        assert_eq!(duration_secs(90.0), "1 min 30 s");
        assert_eq!(duration_secs(3599.6), "1 h");
        assert_eq!(duration_secs(7_500.0), "2 h 5 min");
        // Rounded to the smaller unit shown: 2 h 5 min 40 s is 2 h 6 min.
        assert_eq!(duration_secs(7_540.0), "2 h 6 min");
        assert_eq!(duration(Duration::from_secs(7 * 86_400)), "7 days");
        assert_eq!(duration(Duration::from_secs(86_400)), "1 day");
        assert_eq!(duration(Duration::from_secs(129_600)), "1 day 12 h");
        assert_eq!(duration(Duration::from_secs(100 * 86_400)), "100 days");
    }

    #[test]
    fn sizes_are_binary_and_move_up_when_rounding_reaches_the_next_unit() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1023), "1,023 B");
        assert_eq!(bytes(1024), "1 KiB");
        assert_eq!(bytes(3 * 1024 * 1024 + 200 * 1024), "3.2 MiB");
        assert_eq!(bytes(45 << 20), "45 MiB");
        assert_eq!(bytes(1_000_000_000), "954 MiB");
        assert_eq!(bytes(4 << 30), "4 GiB");
        assert_eq!(bytes((1 << 20) - 1), "1 MiB");
        assert_eq!(bytes(u64::MAX), "16 EiB");
        assert_eq!(bytes_f64(43_232_788.48), "41.2 MiB");
        assert_eq!(bytes_f64(100.4), "100 B");
    }

    #[test]
    fn rates_name_what_they_count() {
        assert_eq!(rate(1234.4, "req"), "1,234 req/s");
        assert_eq!(rate(12.34, "req"), "12.3 req/s");
        assert_eq!(rate(117_542.76, ""), "117,543/s");
        assert_eq!(bytes_per_s(12.3 * 1_048_576.0), "12.3 MiB/s");
        assert_eq!(percent(0.037_4), "0.0374 %");
        assert_eq!(percent(100.0), "100 %");
    }

    #[test]
    fn a_clock_shows_the_two_largest_units() {
        assert_eq!(clock(Duration::from_secs(8)), "8s");
        assert_eq!(clock(Duration::from_secs(213)), "3m33s");
        assert_eq!(clock(Duration::from_secs(3900)), "1h05m");
    }
}

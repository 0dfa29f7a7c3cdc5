//! The parser and the counter rules on captured and hand-made pages, and bad pages.

use super::*;

/// The scoring workload's page (workloads/scoring), after a short load.
const SCORING: &str = include_str!("../testdata/scoring-metrics.txt");
/// A hand-made page: runtime counters, escapes, timestamps, a gauge named like a counter.
const APP: &str = include_str!("../testdata/app-metrics.txt");

#[test]
fn labels_with_escapes_timestamps_and_spaces_are_parsed() {
    let page = parse(APP);
    assert!(page.bad.is_empty(), "{:?}", page.bad);
    let reqs: Vec<&Sample> = page
        .samples
        .iter()
        .filter(|s| s.name == "api_http_requests_total")
        .collect();
    assert_eq!(reqs.len(), 3);
    assert_eq!(reqs[0].label("route"), Some("/items/{id}"));
    assert_eq!(reqs[0].label("note"), Some("say \"hi\"\\n"));
    assert_eq!(reqs[0].timestamp, Some(1_700_000_000_000));
    assert_eq!(reqs[1].label("note"), Some("multi\nline"));
    assert_eq!(reqs[2].label("route"), Some("/health"));
    assert_eq!(reqs[2].value, 27.0);
    assert_eq!(page.types.get("api_jobs"), Some(&"counter"));
    let gc = page
        .samples
        .iter()
        .find(|s| s.name == "go_gc_duration_seconds")
        .unwrap();
    assert_eq!(gc.value, 4.1e-5);
}

#[test]
fn the_request_counter_is_chosen_and_summed_over_its_series() {
    let c = read_page(APP, None).unwrap();
    assert_eq!(c.metric, "api_http_requests_total");
    assert_eq!(c.value, 1527.0);
    assert_eq!(c.series, 3);
    assert_eq!(
        c.describe(),
        "chose api_http_requests_total, sum of 3 series"
    );
}

#[test]
fn the_scoring_page_gives_its_request_count_not_errors_or_cache_misses() {
    let c = read_page(SCORING, None).unwrap();
    assert_eq!(c.metric, "scoring_request_duration_seconds_count");
    assert_eq!(c.value, 18215.0);
    assert_eq!(
        c.describe(),
        "chose scoring_request_duration_seconds_count, 1 series"
    );
}

#[test]
fn any_work_counter_is_the_last_rule_and_runtime_counters_are_never_chosen() {
    let page = "# TYPE app_errors_total counter\napp_errors_total 5\n\
                # TYPE app_jobs counter\napp_jobs_total 12\n\
                # TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 99\n";
    assert_eq!(read_page(page, None).unwrap().metric, "app_jobs_total");
    let only_runtime = "# TYPE go_memstats_frees_total counter\ngo_memstats_frees_total 5\n\
                        # TYPE promhttp_metric_handler_requests_total counter\n\
                        promhttp_metric_handler_requests_total{code=\"200\"} 3\n";
    assert!(matches!(
        read_page(only_runtime, None),
        Err(Fault::MetricMissing(m)) if m.contains("`metric`")
    ));
}

#[test]
fn among_metrics_of_one_rule_the_busiest_wins() {
    let page = "a_requests_total 5\nb_requests_total 50\nc_requests_total 50\n";
    assert_eq!(read_page(page, None).unwrap().metric, "b_requests_total");
}

#[test]
fn a_configured_metric_is_read_or_named_as_missing() {
    assert_eq!(read_page(APP, Some("api_jobs_total")).unwrap().value, 42.0);
    assert!(matches!(
        read_page(APP, Some("nope_total")),
        Err(Fault::MetricMissing(m)) if m == "metric nope_total"
    ));
}

#[test]
fn garbage_and_empty_pages_are_refused_naming_the_first_bad_line() {
    let html = "<html>\n<body>Not the metrics you are looking for</body>\n</html>\n";
    assert!(matches!(
        read_page(html, None),
        Err(Fault::Garbage(g)) if g == "line 1: <html>"
    ));
    assert!(matches!(read_page("", None), Err(Fault::MetricMissing(_))));
    assert!(matches!(
        read_page("# only comments\n", None),
        Err(Fault::MetricMissing(_))
    ));
    for bad in [
        "x{a=\"unterminated} 1",
        "x{a=b} 1",
        "x{=\"v\"} 1",
        "x 1 2 3",
        "x one",
        "9x 1",
        "x{a=\"1\"}",
    ] {
        let page = parse(bad);
        assert_eq!(page.samples.len(), 0, "{bad}");
        assert_eq!(page.bad.len(), 1, "{bad}");
    }
}

#[test]
fn a_counter_that_is_not_a_number_is_garbage() {
    assert!(matches!(
        read_page("x_requests_total NaN\n", Some("x_requests_total")),
        Err(Fault::Garbage(g)) if g.contains("NaN")
    ));
    assert_eq!(parse("x +Inf\n").samples[0].value, f64::INFINITY);
}

#[test]
fn a_huge_page_parses_in_one_pass() {
    let mut page = String::new();
    for i in 0..50_000 {
        page.push_str(&format!("svc_requests_total{{shard=\"{i}\"}} 2\n"));
    }
    let c = read_page(&page, None).unwrap();
    assert_eq!((c.series, c.value), (50_000, 100_000.0));
}

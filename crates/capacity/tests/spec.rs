//! The capacity file's checks: each bad input is refused naming the file and the field, and
//! says what to write instead; the example file parses.

use std::path::Path;

use perfpilot_capacity::Capacity;

const BASE: &str = r#"
[[tier]]
name = "db"
kind = "postgres"
[[tier]]
name = "app"
kind = "command"
command = "app --port {port}"
[[tier]]
name = "proxy"
kind = "nginx"
upstream = "app"
[[class]]
name = "score"
path = "/score"
[[sweep]]
name = "s"
users = [1, 2, 4]
"#;

fn err(text: &str) -> String {
    Capacity::parse(text, Path::new("bad.toml"))
        .map(|_| String::new())
        .unwrap_err()
        .to_string()
}

#[test]
fn a_proxy_over_an_unknown_tier_is_refused() {
    let e = err(&BASE.replace("upstream = \"app\"", "upstream = \"web\""));
    assert!(
        e.starts_with("bad.toml: ") && e.contains("upstream `web`"),
        "{e}"
    );
}

#[test]
fn a_second_host_without_a_second_instance_is_refused() {
    let e = err(&format!("{BASE}second_host = \"app\"\n"));
    assert!(
        e.contains("second_host = `app` needs instances.app >= 2"),
        "{e}"
    );
}

#[test]
fn a_measured_window_too_short_for_the_steady_state_check_is_refused() {
    let e = err(&format!("{BASE}[capacity]\nmeasure = \"2s\"\n"));
    assert!(
        e.contains("capacity.measure") && e.contains("at least 4s"),
        "{e}"
    );
}

#[test]
fn a_fit_point_the_sweeps_do_not_measure_is_refused() {
    let e = err(&format!("{BASE}[capacity]\nfit = [\"s: 3\"]\n"));
    assert!(e.contains("the sweep has no 3-user point"), "{e}");
    let e = err(&format!("{BASE}[capacity]\nfit = [\"t: 1\"]\n"));
    assert!(e.contains("no sweep `t`"), "{e}");
}

#[test]
fn an_unknown_field_is_refused_with_its_line() {
    let e = err(&BASE.replace("kind = \"postgres\"", "kind = \"postgres\"\nquota = 1"));
    assert!(e.contains("quota") && e.contains("line"), "{e}");
}

#[test]
fn by_default_the_model_is_fitted_from_the_two_lowest_points_of_the_first_sweep() {
    let c = Capacity::parse(BASE, Path::new("ok.toml")).unwrap();
    assert_eq!(c.fit_labels(), ["s: 1", "s: 2"]);
    assert_eq!(c.front().name, "proxy");
}

#[test]
fn the_example_file_parses() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::env::set_current_dir(&root).unwrap();
    let c = Capacity::load(Path::new("examples/capacity/three-tier.toml")).unwrap();
    assert_eq!(c.file.tier.len(), 3);
    assert_eq!(c.fit_labels().len(), 3);
}

#[test]
fn a_sweep_listing_a_load_twice_is_refused_and_told_about_repeat() {
    let e = err(&BASE.replace("users = [1, 2, 4]", "users = [1, 2, 2, 4]"));
    assert!(
        e.contains("sweep `s`: users lists 2 twice") && e.contains("capacity.repeat"),
        "{e}"
    );
}

#[test]
fn repeat_measures_the_first_fit_point_again_within_a_limit() {
    let c = Capacity::parse(
        &format!("{BASE}[capacity]\nrepeat = 8\n"),
        Path::new("ok.toml"),
    )
    .unwrap();
    assert_eq!((c.repeat, c.repeat_point()), (8, Some((0, 1))));
    let c = Capacity::parse(
        &format!("{BASE}[capacity]\nrepeat = 3\nfit = [\"s: 2\", \"s: 4\"]\n"),
        Path::new("ok.toml"),
    )
    .unwrap();
    assert_eq!(c.repeat_point(), Some((0, 2)));
    let c = Capacity::parse(BASE, Path::new("ok.toml")).unwrap();
    assert_eq!(c.repeat_point(), None);
    let e = err(&format!("{BASE}[capacity]\nrepeat = 51\n"));
    assert!(e.contains("capacity.repeat = 51: at most 50"), "{e}");
}

#[test]
fn rounds_default_to_one_and_are_refused_outside_one_to_ten() {
    assert_eq!(
        Capacity::parse(BASE, Path::new("ok.toml")).unwrap().rounds,
        1
    );
    let c = Capacity::parse(
        &format!("{BASE}[capacity]\nrounds = 3\n"),
        Path::new("ok.toml"),
    )
    .unwrap();
    assert_eq!(c.rounds, 3);
    for bad in [0, 11] {
        let e = err(&format!("{BASE}[capacity]\nrounds = {bad}\n"));
        assert!(
            e.contains("bad.toml") && e.contains(&format!("capacity.rounds = {bad}: give 1 to 10")),
            "{e}"
        );
    }
}

#[test]
fn balance_is_for_the_proxy_and_defaults_to_round_robin() {
    use perfpilot_capacity::spec::Balance;
    let c = Capacity::parse(BASE, Path::new("ok.toml")).unwrap();
    assert_eq!(c.front().balance, None);
    let text = BASE.replace(
        "upstream = \"app\"",
        "upstream = \"app\"\nbalance = \"least_conn\"",
    );
    let c = Capacity::parse(&text, Path::new("ok.toml")).unwrap();
    assert_eq!(c.front().balance, Some(Balance::LeastConn));
    let text = BASE.replace(
        "command = \"app --port {port}\"",
        "command = \"app --port {port}\"\nbalance = \"least_conn\"",
    );
    let e = err(&text);
    assert!(
        e.contains("bad.toml") && e.contains("tier `app`: `balance` is for an nginx tier"),
        "{e}"
    );
    let e = err(&BASE.replace(
        "upstream = \"app\"",
        "upstream = \"app\"\nbalance = \"random\"",
    ));
    assert!(e.contains("balance") && e.contains("least_conn"), "{e}");
}

//! Error positions from `toml::Spanned` and the shell-word splitting, beyond what
//! `tests/spec.rs` covers: the line named is the offending value's own.

use std::path::Path;

use super::Study;

const BASE: &str = r#"name = "t"

[deployment]
command = "app --port {port} --cache {cache}"

[load]
url = "http://127.0.0.1:{port}/"

[factors]
cache = [2, 100]
"#;

fn error(text: &str) -> String {
    match Study::parse(text, Path::new("s.toml")) {
        Ok(_) => panic!("the study should be rejected:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_bad_second_knob_is_named_at_its_own_line() {
    let text = BASE.replace(
        "[load]",
        "[[deployment.knobs]]\npath = \"sys/a\"\nvalue = \"1\"\n\n[[deployment.knobs]]\npath = \"/etc/passwd\"\nvalue = \"2\"\n\n[load]",
    );
    let e = error(&text);
    assert!(e.starts_with("s.toml:11: deployment.knobs[1]:"), "{e}");
}

#[test]
fn a_ready_table_names_the_line_of_its_field() {
    let text = BASE.replace(
        "\n[load]",
        "\n[deployment.ready]\nhttp = \"http://127.0.0.1:{port}/\"\ntcp = true\n\n[load]",
    );
    let e = error(&text);
    assert!(e.starts_with("s.toml:8: deployment.ready:"), "{e}");
}

#[test]
fn an_element_of_a_multi_line_list_is_named_at_its_line() {
    let text =
        format!("{BASE}\n[objective]\nconstraints = [\n  \"errors < 1%\",\n  \"p99 << 3\",\n]\n");
    let e = error(&text);
    assert!(e.starts_with("s.toml:15: objective.constraints:"), "{e}");
}

#[test]
fn a_load_without_url_or_command_is_named_at_its_header() {
    let e = error(&BASE.replace("url = \"http://127.0.0.1:{port}/\"\n", ""));
    assert!(e.starts_with("s.toml:6: load: needs url"), "{e}");
}

#[test]
fn inline_factors_keep_the_file_order() {
    let text = "factors = { zeta = [1, 2], alpha = [3] }\n\n[deployment]\ncommand = \"app\"\n\n[load]\nurl = \"http://x:{port}/\"\n";
    let s = Study::parse(text, Path::new("s.toml")).unwrap();
    let names: Vec<&str> = s.factors.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["zeta", "alpha"]);
}

//! Preflight: the programs, files and ports a study needs, checked before a run without
//! running anything; each finding names the field and the path or port.

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use perfpilot_study::Study;
use perfpilot_study::spec::{Finding, FindingKind, PortHolder, Severity, preflight};

/// A port free a moment ago, so that port findings stay out of tests about other things.
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A study from `deployment` lines (`base_port` a free port unless they give one) and `rest`,
/// which continues the `[load]` table whose url is set.
fn study(deployment: &str, rest: &str) -> Study {
    let mut text = String::from("[deployment]\n");
    if !deployment.contains("base_port") {
        text.push_str(&format!("base_port = {}\n", free_port()));
    }
    text.push_str(deployment);
    text.push_str("\n\n[load]\nurl = \"http://127.0.0.1:{port}/\"\n");
    text.push_str(rest);
    Study::parse(&text, Path::new("preflight.toml")).unwrap()
}

/// The findings about `field`.
fn about<'a>(found: &'a [Finding], field: &str) -> Vec<&'a Finding> {
    found.iter().filter(|f| f.field == field).collect()
}

/// An executable (or, with `mode` 0o644, a plain) file at `dir/rel`.
fn program(dir: &Path, rel: &str, mode: u32) -> PathBuf {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

#[test]
fn a_command_naming_a_missing_binary_is_an_error_naming_the_field_and_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let s = study(
        "command = \"target/release/scoring-model --port {port}\"",
        "",
    );
    let found = preflight(&s, dir.path());
    let f = about(&found, "deployment.command");
    assert_eq!(f.len(), 1, "{found:?}");
    assert!(f[0].is_error());
    assert_eq!(
        f[0].kind,
        FindingKind::Missing {
            path: dir.path().join("target/release/scoring-model")
        }
    );
    assert!(
        f[0].fix
            .contains("cargo build --release --bin scoring-model"),
        "{}",
        f[0].fix
    );
    let text = f[0].to_string();
    assert!(text.starts_with("error: deployment.command: "), "{text}");
    assert!(
        text.contains("target/release/scoring-model does not exist"),
        "{text}"
    );
}

#[test]
fn an_existing_executable_binary_gives_no_finding() {
    let dir = tempfile::tempdir().unwrap();
    program(dir.path(), "bin/app", 0o755);
    let s = study("command = \"bin/app --port {port}\"", "");
    let found = preflight(&s, dir.path());
    assert!(about(&found, "deployment.command").is_empty(), "{found:?}");
    assert!(!found.iter().any(Finding::is_error), "{found:?}");
}

#[test]
fn a_binary_without_an_execute_bit_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    program(dir.path(), "bin/app", 0o644);
    let s = study("command = \"./bin/app --port {port}\"", "");
    let found = preflight(&s, dir.path());
    let f = about(&found, "deployment.command");
    assert_eq!(f.len(), 1, "{found:?}");
    assert_eq!(f[0].severity, Severity::Error);
    let path = dir.path().join("bin/app");
    assert_eq!(f[0].kind, FindingKind::NotExecutable { path: path.clone() });
    assert!(f[0].fix.contains("chmod +x"), "{}", f[0].fix);
    let text = f[0].to_string();
    assert!(
        text.contains(&format!("{} is not executable", path.display())),
        "{text}"
    );
}

#[test]
fn a_program_on_path_gives_no_finding_and_one_missing_from_it_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let ok = study("command = \"sh -c 'exec sleep 100'\"", "");
    assert!(about(&preflight(&ok, dir.path()), "deployment.command").is_empty());
    let bad = study(
        "command = \"no-such-program-of-perfpilot --port {port}\"",
        "",
    );
    let found = preflight(&bad, dir.path());
    let f = about(&found, "deployment.command");
    assert_eq!(f.len(), 1, "{found:?}");
    assert_eq!(
        f[0].kind,
        FindingKind::NotOnPath {
            program: "no-such-program-of-perfpilot".into()
        }
    );
}

#[test]
fn a_binary_a_setup_step_makes_is_a_note_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let s = study(
        "command = \"target/release/app --port {port}\"\nsetup = [\"mkdir -p target/release\", \"cp /bin/true target/release/app\"]",
        "",
    );
    let found = preflight(&s, dir.path());
    assert!(!found.iter().any(Finding::is_error), "{found:?}");
    let f = about(&found, "deployment.command");
    assert_eq!(f.len(), 1, "{found:?}");
    assert_eq!(f[0].severity, Severity::Note);
    assert_eq!(
        f[0].kind,
        FindingKind::MadeBySetup {
            path: dir.path().join("target/release/app"),
            by: "deployment.setup[1]".into()
        }
    );
    assert!(f[0].to_string().contains("made by setup"), "{}", f[0]);
}

#[test]
fn a_setup_step_whose_own_program_is_missing_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let s = study(
        "command = \"sh -c 'exec sleep 100'\"\nsetup = [\"true\", \"./build.sh --release\"]",
        "",
    );
    let found = preflight(&s, dir.path());
    assert!(about(&found, "deployment.setup[0]").is_empty(), "{found:?}");
    let f = about(&found, "deployment.setup[1]");
    assert_eq!(f.len(), 1, "{found:?}");
    assert!(f[0].is_error());
    assert_eq!(
        f[0].kind,
        FindingKind::Missing {
            path: dir.path().join("build.sh")
        }
    );
}

#[test]
fn a_teardown_program_that_is_missing_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let s = study(
        "command = \"sh\"\nteardown = [\"A=1 ./cleanup {instances}\"]",
        "",
    );
    let found = preflight(&s, dir.path());
    let f = about(&found, "deployment.teardown[0]");
    assert_eq!(f.len(), 1, "{found:?}");
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(
        f[0].to_string().contains("cleanup does not exist"),
        "{}",
        f[0]
    );
}

#[test]
fn each_level_of_a_factor_in_the_command_is_looked_for() {
    let dir = tempfile::tempdir().unwrap();
    program(dir.path(), "bin/a", 0o755);
    let s = study(
        "command = \"{server} --port {port}\"",
        "\n[factors]\nserver = [\"bin/a\", \"bin/b\"]\ninstances = [1, 2]\n",
    );
    let found = preflight(&s, dir.path());
    let f = about(&found, "deployment.command");
    assert_eq!(f.len(), 1, "{found:?}");
    assert_eq!(
        f[0].kind,
        FindingKind::Missing {
            path: dir.path().join("bin/b")
        }
    );
}

#[test]
fn an_adapter_program_is_looked_for_where_the_study_runs() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[deployment]\ncommand = \"sh\"\nbase_port = {}\n\n[load]\ncommand = \"./bench.sh {{targets}} {{users}}\"\n",
        free_port()
    );
    let s = Study::parse(&text, Path::new("adapter.toml")).unwrap();
    let found = preflight(&s, dir.path());
    let f = about(&found, "load.command");
    assert_eq!(f.len(), 1, "{found:?}");
    assert!(f[0].is_error());
    assert_eq!(
        f[0].kind,
        FindingKind::Missing {
            path: dir.path().join("bench.sh")
        }
    );
}

#[test]
fn a_missing_body_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body.json");
    std::fs::write(&body, "{}").unwrap();
    let s = study(
        "command = \"sh\"",
        &format!("method = \"POST\"\nbody_file = \"{}\"\n", body.display()),
    );
    assert!(about(&preflight(&s, dir.path()), "load.body_file").is_empty());
    std::fs::remove_file(&body).unwrap();
    let found = preflight(&s, dir.path());
    let f = about(&found, "load.body_file");
    assert_eq!(f.len(), 1, "{found:?}");
    assert!(f[0].is_error());
    assert_eq!(f[0].kind, FindingKind::Missing { path: body.clone() });
    assert!(f[0].to_string().contains("body.json"), "{}", f[0]);
}

#[test]
fn a_missing_data_file_and_allocator_library_are_named_by_their_fields() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("rows.csv");
    let lib = dir.path().join("libmine.so");
    std::fs::write(&data, "a\n1\n").unwrap();
    std::fs::write(&lib, "").unwrap();
    let s = study(
        "command = \"sh\"",
        &format!(
            "body = \"{{{{a}}}}\"\ndata = \"{}\"\n\n[allocators]\nmine = \"{}\"\n\n[factors]\nallocator = [\"system\", \"mine\"]\n",
            data.display(),
            lib.display()
        ),
    );
    std::fs::remove_file(&data).unwrap();
    std::fs::remove_file(&lib).unwrap();
    let found = preflight(&s, dir.path());
    let f = about(&found, "load.data");
    assert_eq!(f.len(), 1, "{found:?}");
    assert_eq!(f[0].kind, FindingKind::Missing { path: data });
    let f = about(&found, "allocators.mine");
    assert_eq!(f.len(), 1, "{found:?}");
    assert_eq!(f[0].kind, FindingKind::Missing { path: lib });
}

#[test]
fn a_missing_workdir_is_named_and_programs_are_not_looked_for_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = study("command = \"bin/app\"\nworkdir = \"not-made-yet\"", "");
    let found = preflight(&s, dir.path());
    let f = about(&found, "deployment.workdir");
    assert_eq!(f.len(), 1, "{found:?}");
    assert_eq!(
        f[0].kind,
        FindingKind::Missing {
            path: dir.path().join("not-made-yet")
        }
    );
    assert!(about(&found, "deployment.command").is_empty(), "{found:?}");
}

#[test]
fn a_knob_this_kernel_lacks_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let s = study(
        "command = \"sh\"\n\n[[deployment.knobs]]\npath = \"sys/kernel/mm/no_such_knob_of_perfpilot\"\nvalue = \"1\"",
        "",
    );
    let found = preflight(&s, dir.path());
    let f = about(&found, "deployment.knobs[0]");
    assert_eq!(f.len(), 1, "{found:?}");
    assert!(f[0].is_error());
    assert_eq!(
        f[0].kind,
        FindingKind::Missing {
            path: PathBuf::from("/sys/kernel/mm/no_such_knob_of_perfpilot")
        }
    );
}

#[test]
fn knob_paths_are_checked_with_their_placeholders_filled_and_a_loop_device_for_the_scratch_one() {
    let dir = tempfile::tempdir().unwrap();
    let s = study(
        "command = \"sh\"\n\n[[deployment.knobs]]\npath = \"sys/block/{device}/queue/read_ahead_kb\"\nvalue = \"{ra}\"\n\n[[deployment.knobs]]\npath = \"sys/block/{device}/queue/{missing}\"\nvalue = \"1\"",
        "\n[storage]\nsize = \"1G\"\nmount = \"/var/tmp/pp-preflight/mnt\"\nbacking = \"/var/tmp/pp-preflight/img\"\nfilesystem = \"ext4\"\n\n[factors]\nra = [16, 128]\nmissing = [\"no_such_knob_a\", \"no_such_knob_b\"]\n",
    );
    let found = preflight(&s, dir.path());
    // The read-ahead knob exists for every block device: nothing to say about it.
    assert!(about(&found, "deployment.knobs[0]").is_empty(), "{found:?}");
    let loops: Vec<String> = std::fs::read_dir("/sys/block")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("loop"))
        .collect();
    let f = about(&found, "deployment.knobs[1]");
    if loops.is_empty() {
        // No loop device yet: the trial that makes one checks the knob.
        assert!(f.is_empty(), "{found:?}");
        return;
    }
    // Each level of the factor in the path is its own file, on a real loop device's queue.
    assert_eq!(f.len(), 2, "{found:?}");
    for (finding, level) in f.iter().zip(["no_such_knob_a", "no_such_knob_b"]) {
        let FindingKind::Missing { path } = &finding.kind else {
            panic!("{finding:?}");
        };
        let text = path.display().to_string();
        assert!(
            text.starts_with("/sys/block/loop") && text.ends_with(&format!("/queue/{level}")),
            "{text}"
        );
    }
}

#[test]
fn a_busy_port_is_named_with_the_process_holding_it() {
    let dir = tempfile::tempdir().unwrap();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let s = study(&format!("command = \"sh\"\nbase_port = {port}"), "");
    let found = preflight(&s, dir.path());
    let f = about(&found, "deployment.base_port");
    assert_eq!(f.len(), 1, "{found:?}");
    assert_eq!(f[0].severity, Severity::Warning);
    let FindingKind::PortBusy {
        port: busy,
        instance,
        holder,
    } = &f[0].kind
    else {
        panic!("not a busy port: {:?}", f[0]);
    };
    assert_eq!((*busy, *instance), (port, 0));
    let pid = holder
        .as_ref()
        .and_then(|h: &PortHolder| h.process.as_ref());
    assert_eq!(pid.map(|p| p.0), Some(std::process::id()), "{holder:?}");
    let text = f[0].to_string();
    assert!(text.contains(&format!("port {port} ")), "{text}");
    assert!(
        text.contains(&format!("pid {}", std::process::id())),
        "{text}"
    );
}

#[test]
fn ports_are_checked_up_to_the_largest_instance_count() {
    let dir = tempfile::tempdir().unwrap();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let names_it = |instances: &str| {
        let s = study(
            &format!("command = \"sh\"\nbase_port = {}", port - 2),
            &format!("\n[factors]\ninstances = {instances}\n"),
        );
        preflight(&s, dir.path()).iter().any(
            |f| matches!(f.kind, FindingKind::PortBusy { port: p, instance: 2, .. } if p == port),
        )
    };
    assert!(!names_it("[1, 2]"));
    assert!(names_it("[1, 3]"));
}

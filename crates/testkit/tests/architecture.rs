//! docs/architecture.md against the workspace, so that the page cannot drift from the code
//! unseen: its crate table names every workspace member (and no other) with the workspace crates
//! it depends on, and its module lists name every module under each member's `src/` (a file
//! `NAME.rs` or a directory `NAME/`, and one level below a directory), and no other. Only the
//! names are compared, never the prose around them. Read with std from the root Cargo.toml, the
//! members' Cargo.toml files and their `src/` trees.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const DOC: &str = "docs/architecture.md";

/// Names under `src/` that are not modules of the crate's code: roots, test files and data,
/// extra binaries.
const NOT_MODULES: &[&str] = &["lib", "main", "mod", "tests", "testdata", "bin"];

/// A workspace member as its files say.
#[derive(Debug, Clone, PartialEq)]
struct Member {
    /// The directory's last component (`sys`, `cli`, `scoring`): how the page's
    /// "depends on" column names a crate.
    short: String,
    /// The package name (`perfpilot-sys`).
    name: String,
    /// Short names of the workspace members in its `[dependencies]`.
    deps: BTreeSet<String>,
    /// Module name → the modules one level below it (empty for a file).
    modules: BTreeMap<String, BTreeSet<String>>,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The lines of one `[section]` of a TOML file, up to the next section header.
fn section<'a>(toml: &'a str, header: &str) -> Vec<&'a str> {
    toml.lines()
        .skip_while(|l| l.trim() != header)
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .collect()
}

/// The quoted strings of `key = [ ... ]` in the `[workspace]` section (one line or several).
fn string_array(toml: &str, key: &str) -> Vec<String> {
    let text = section(toml, "[workspace]").join("\n");
    let Some(start) = text.lines().position(|l| {
        l.trim_start()
            .strip_prefix(key)
            .is_some_and(|rest| rest.trim_start().starts_with('='))
    }) else {
        return Vec::new();
    };
    let rest: String = text.lines().skip(start).collect::<Vec<_>>().join("\n");
    let open = rest.find('[').expect("an array after the key");
    let close = rest.find(']').expect("the array's end");
    rest[open + 1..close]
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .flat_map(|l| l.split(','))
        .map(|s| s.trim().trim_matches('"').to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The value of `key = "value"` in a section's lines.
fn string_value(lines: &[&str], key: &str) -> Option<String> {
    lines.iter().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
    })
}

/// Module names in a directory: `NAME.rs` files and `NAME/` directories.
fn module_names(dir: &Path) -> BTreeSet<String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return BTreeSet::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let module = if e.path().is_dir() {
                name
            } else {
                name.strip_suffix(".rs")?.to_string()
            };
            (!module.starts_with('.') && !NOT_MODULES.contains(&module.as_str())).then_some(module)
        })
        .collect()
}

fn modules(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    module_names(src)
        .into_iter()
        .map(|m| {
            let below = module_names(&src.join(&m));
            (m, below)
        })
        .collect()
}

/// Every workspace member: the root Cargo.toml's `members` (directories, or `dir/*`) less its
/// `exclude`.
fn workspace(root: &Path) -> Vec<Member> {
    let toml = read(&root.join("Cargo.toml"));
    let exclude: BTreeSet<PathBuf> = string_array(&toml, "exclude")
        .into_iter()
        .map(|e| root.join(e))
        .collect();
    let mut dirs = Vec::new();
    for pattern in string_array(&toml, "members") {
        match pattern.strip_suffix("/*") {
            Some(parent) => {
                let parent = root.join(parent);
                let entries = fs::read_dir(&parent)
                    .unwrap_or_else(|e| panic!("cannot list {}: {e}", parent.display()));
                dirs.extend(entries.filter_map(|e| e.ok()).map(|e| e.path()));
            }
            None => dirs.push(root.join(pattern)),
        }
    }
    dirs.retain(|d| d.join("Cargo.toml").is_file() && !exclude.contains(d));
    dirs.sort();
    let mut members: Vec<Member> = dirs
        .iter()
        .map(|dir| {
            let toml = read(&dir.join("Cargo.toml"));
            let name = string_value(&section(&toml, "[package]"), "name")
                .unwrap_or_else(|| panic!("no package name in {}/Cargo.toml", dir.display()));
            let deps = section(&toml, "[dependencies]")
                .iter()
                .filter_map(|l| l.split(['=', '.']).next())
                .map(|k| k.trim().to_string())
                .filter(|k| !k.is_empty() && !k.starts_with('#'))
                .collect();
            Member {
                short: dir
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or_default()
                    .to_string(),
                name,
                deps,
                modules: modules(&dir.join("src")),
            }
        })
        .collect();
    // Dependencies by package name → by the short names the page uses, workspace members only.
    let short_of: BTreeMap<String, String> = members
        .iter()
        .map(|m| (m.name.clone(), m.short.clone()))
        .collect();
    for m in &mut members {
        m.deps = m
            .deps
            .iter()
            .filter_map(|d| short_of.get(d).cloned())
            .collect();
    }
    members
}

/// The names between backticks in `text`, at parenthesis depth 0 and 1: each top-level name
/// with the names in the parentheses that follow it. Deeper names are left out.
fn nested_names(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut depth = 0usize;
    let mut last_top: Option<String> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            '`' => {
                let name: String = chars.by_ref().take_while(|&c| c != '`').collect();
                if depth == 0 {
                    out.entry(name.clone()).or_default();
                    last_top = Some(name);
                } else if depth == 1
                    && let Some(top) = &last_top
                {
                    out.entry(top.clone()).or_default().insert(name);
                }
            }
            _ => {}
        }
    }
    out
}

/// What the page says of one crate.
#[derive(Debug, Default)]
struct Described {
    /// Short names of workspace crates in its "depends on" cell.
    deps: BTreeSet<String>,
    /// Its module list, when the page has one.
    modules: Option<BTreeMap<String, BTreeSet<String>>>,
}

/// The crate table (the table whose header starts `| crate |`) and the bullets of the
/// `## Modules` section (`- \`NAME\` …: \`module\` (\`below\`, …), …`), by package name.
fn described(doc: &str, shorts: &BTreeSet<String>) -> BTreeMap<String, Described> {
    let mut out: BTreeMap<String, Described> = BTreeMap::new();
    let rows = doc
        .lines()
        .skip_while(|l| !l.replace(' ', "").starts_with("|crate|"))
        .skip(2)
        .take_while(|l| l.starts_with('|'));
    for row in rows {
        let cells: Vec<&str> = row.split('|').collect();
        let (Some(name), Some(deps)) = (cells.get(1), cells.get(2)) else {
            continue;
        };
        let Some(name) = name.split('`').nth(1) else {
            continue;
        };
        // "drive (fetch)": the parenthesis says what of it is used.
        let mut plain = String::new();
        let mut depth = 0usize;
        for c in deps.chars() {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                c if depth == 0 => plain.push(c),
                _ => {}
            }
        }
        out.entry(name.to_string()).or_default().deps = plain
            .split([',', ' ', '`'])
            .map(str::trim)
            .filter(|w| shorts.contains(*w))
            .map(str::to_string)
            .collect();
    }
    let section = doc
        .lines()
        .skip_while(|l| l.trim() != "## Modules")
        .skip(1)
        .take_while(|l| !l.starts_with("## "));
    let mut entries: Vec<String> = Vec::new();
    for line in section {
        if line.starts_with("- `") {
            entries.push(line[2..].to_string());
        } else if line.starts_with(' ')
            && let Some(entry) = entries.last_mut()
        {
            entry.push(' ');
            entry.push_str(line.trim());
        } else if !line.trim().is_empty() {
            // A paragraph after the list ends it.
            if !entries.is_empty() {
                break;
            }
        }
    }
    for entry in entries {
        let Some(name) = entry.split('`').nth(1) else {
            continue;
        };
        let list = entry.split_once(':').map_or("", |(_, list)| list);
        out.entry(name.to_string()).or_default().modules = Some(nested_names(list));
    }
    out
}

fn joined<'a>(names: impl IntoIterator<Item = &'a String>) -> String {
    names
        .into_iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every difference between the page and the workspace, one line each.
fn differences(doc: &str, members: &[Member]) -> Vec<String> {
    let shorts: BTreeSet<String> = members.iter().map(|m| m.short.clone()).collect();
    let page = described(doc, &shorts);
    let mut out = Vec::new();
    let names: BTreeSet<&String> = members.iter().map(|m| &m.name).collect();
    for extra in page.keys().filter(|n| !names.contains(n)) {
        out.push(format!(
            "crate `{extra}` is described but is not a workspace member: remove it"
        ));
    }
    for m in members {
        let Some(d) = page.get(&m.name) else {
            out.push(format!(
                "crate `{}` ({}) is missing from the crate table and the module lists",
                m.name, m.short
            ));
            continue;
        };
        let missing: Vec<_> = m.deps.difference(&d.deps).collect();
        if !missing.is_empty() {
            out.push(format!(
                "crate `{}` depends on {} but its row's \"depends on\" does not say so",
                m.name,
                joined(missing)
            ));
        }
        let extra: Vec<_> = d.deps.difference(&m.deps).collect();
        if !extra.is_empty() {
            out.push(format!(
                "crate `{}`'s row says it depends on {}, which its Cargo.toml does not",
                m.name,
                joined(extra)
            ));
        }
        let Some(listed) = &d.modules else {
            out.push(format!(
                "crate `{}` has no bullet under \"## Modules\"",
                m.name
            ));
            continue;
        };
        module_differences(&m.name, &m.modules, listed, &mut out);
    }
    out
}

fn module_differences(
    krate: &str,
    tree: &BTreeMap<String, BTreeSet<String>>,
    listed: &BTreeMap<String, BTreeSet<String>>,
    out: &mut Vec<String>,
) {
    for (module, below) in tree {
        let Some(listed_below) = listed.get(module) else {
            out.push(format!(
                "module `{module}` of `{krate}` is missing from its module list"
            ));
            continue;
        };
        for b in below.difference(listed_below) {
            out.push(format!(
                "module `{module}::{b}` of `{krate}` is missing from its module list \
                 (in the parentheses after `{module}`)"
            ));
        }
        for b in listed_below.difference(below) {
            out.push(format!(
                "module `{module}::{b}` is listed for `{krate}` but is not in its src/ tree"
            ));
        }
    }
    for module in listed.keys().filter(|m| !tree.contains_key(*m)) {
        out.push(format!(
            "module `{module}` is listed for `{krate}` but is not in its src/ tree"
        ));
    }
}

#[test]
fn the_crate_table_and_module_lists_match_the_workspace() {
    let root = repo();
    let members = workspace(&root);
    assert!(
        members.len() > 10 && members.iter().any(|m| m.name == "perfpilot-sys"),
        "the workspace's members were not found from {}: {members:?}",
        root.join("Cargo.toml").display()
    );
    let doc = read(&root.join(DOC));
    let problems = differences(&doc, &members);
    assert!(
        problems.is_empty(),
        "{DOC} has drifted from the workspace:\n  - {}\nupdate {DOC} (its crate table and its \
         \"## Modules\" list) to match the code",
        problems.join("\n  - ")
    );
}

fn member(short: &str, deps: &[&str], modules: &[(&str, &[&str])]) -> Member {
    Member {
        short: short.to_string(),
        name: format!("perfpilot-{short}"),
        deps: deps.iter().map(|d| d.to_string()).collect(),
        modules: modules
            .iter()
            .map(|(m, below)| (m.to_string(), below.iter().map(|b| b.to_string()).collect()))
            .collect(),
    }
}

const SAMPLE: &str = "\
| crate | depends on | holds |
|---|---|---|
| `perfpilot-sys` | — | Linux (`fs`, `change`) |
| `perfpilot-drive` | sys (clocks), `statrs` | load |

## Modules

- `perfpilot-sys` (`crates/sys`): `change`, `process` (`maps`,
  `stat`).
- `perfpilot-drive`: `coord` (`wire`), `fetch`.

## Next
";

fn sample_members() -> Vec<Member> {
    vec![
        member(
            "sys",
            &[],
            &[("change", &[]), ("process", &["maps", "stat"])],
        ),
        member("drive", &["sys"], &[("coord", &["wire"]), ("fetch", &[])]),
    ]
}

#[test]
fn a_page_that_matches_has_no_differences() {
    assert_eq!(differences(SAMPLE, &sample_members()), Vec::<String>::new());
}

#[test]
fn a_crate_missing_from_the_page_is_named() {
    let mut members = sample_members();
    members.push(member("chart", &[], &[]));
    let problems = differences(SAMPLE, &members);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("`perfpilot-chart`"), "{problems:?}");
}

#[test]
fn a_crate_described_but_gone_is_named() {
    let members = vec![sample_members().remove(0)];
    let problems = differences(SAMPLE, &members);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("`perfpilot-drive`") && problems[0].contains("not a workspace"),
        "{problems:?}"
    );
}

#[test]
fn a_dependency_the_row_does_not_give_is_named() {
    let mut members = sample_members();
    members[1].deps.insert("chart".into());
    members.push(member("chart", &[], &[]));
    let problems = differences(SAMPLE, &members);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("`perfpilot-drive` depends on `chart`")),
        "{problems:?}"
    );
}

#[test]
fn modules_missing_or_extra_at_either_level_are_named() {
    let mut members = sample_members();
    members[0].modules.insert("clock".into(), BTreeSet::new());
    members[0].modules.remove("change");
    let process = members[0].modules.get_mut("process").expect("process");
    process.remove("stat");
    process.insert("status".into());
    let problems = differences(SAMPLE, &members).join("\n");
    for expected in [
        "module `clock` of `perfpilot-sys` is missing",
        "module `change` is listed for `perfpilot-sys` but is not in its src/ tree",
        "module `process::status` of `perfpilot-sys` is missing",
        "module `process::stat` is listed for `perfpilot-sys` but is not",
    ] {
        assert!(
            problems.contains(expected),
            "no {expected:?} in:\n{problems}"
        );
    }
}

#[test]
fn the_root_cargo_toml_s_members_and_excludes_are_read() {
    let toml = "[workspace]\nresolver = \"3\"\nmembers = [\n  \"crates/*\", # the libraries\n  \"workloads/*\",\n]\nexclude = [\"workloads/jvmcache\"]\n\n[workspace.package]\nmembers = [\"no\"]\n";
    assert_eq!(string_array(toml, "members"), ["crates/*", "workloads/*"]);
    assert_eq!(string_array(toml, "exclude"), ["workloads/jvmcache"]);
}

//! PostgreSQL's own settings, from the configuration files of each running cluster (found from
//! the postmaster's `-D` and `-c config_file=`) and the postmaster's command line, which
//! overrides them (`-c name=value`, `--name=value`, `-B`): `huge_pages` against the huge pages
//! reserved, and `shared_buffers` against the machine's memory. No connection is made.

use std::collections::BTreeMap;

use perfpilot_units::bytes;

use super::{Ctx, Found, base};
use crate::finding::{Evidence, Severity, Verify};
use crate::procs::Proc;

const CHECK: &str = "postgres";
const WHY_PG: &str = "PostgreSQL documentation, 19.4 Resource Consumption (shared_buffers: a reasonable starting value is 25 % of memory; huge_pages) and 19.4.5 Linux Huge Pages";
/// shared_buffers from which huge pages matter.
const LARGE_BUFFERS: u64 = 1 << 30;
/// shared_buffers at or under which the setting is the default.
const DEFAULT_BUFFERS: u64 = 128 << 20;
/// Memory from which the default shared_buffers is small.
const ROOMY: u64 = 4 << 30;

/// The settings of one cluster: where each came from.
struct Settings {
    values: BTreeMap<String, (String, String)>,
}

impl Settings {
    fn get(&self, name: &str) -> Option<(&str, &str)> {
        self.values
            .get(name)
            .map(|(v, src)| (v.as_str(), src.as_str()))
    }
}

/// `name = value # comment` lines; quotes removed, names lowercased.
pub(crate) fn parse_conf(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, rest) = match line.split_once('=') {
            Some((n, r)) => (n.trim(), r.trim()),
            None => match line.split_once(char::is_whitespace) {
                Some((n, r)) => (n.trim(), r.trim()),
                None => continue,
            },
        };
        let value = if let Some(q) = rest.strip_prefix('\'') {
            q.split('\'').next().unwrap_or("").to_string()
        } else {
            rest.split('#').next().unwrap_or("").trim().to_string()
        };
        out.push((name.to_ascii_lowercase(), value));
    }
    out
}

/// A memory setting in bytes: `128MB`, `8GB`, `1024kB`, or a bare number of 8 kB pages.
pub(crate) fn pg_memory(v: &str) -> Option<u64> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let n: u64 = v[..split].parse().ok()?;
    let mult = match v[split..].trim() {
        "" => 8192,
        "B" => 1,
        "kB" => 1 << 10,
        "MB" => 1 << 20,
        "GB" => 1 << 30,
        "TB" => 1 << 40,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// The data directory and configuration file of a postmaster, from its command line.
fn locations(p: &Proc) -> Option<(String, Option<String>)> {
    let args = &p.cmdline;
    let mut data = None;
    let mut conf = None;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "-D" {
            data = args.get(i + 1).cloned();
            i += 1;
        } else if let Some(d) = a.strip_prefix("-D") {
            data = Some(d.to_string());
        } else if let Some(d) = a.strip_prefix("--pgdata=") {
            data = Some(d.to_string());
        } else if a == "-c" {
            if let Some(c) = args.get(i + 1).and_then(|s| s.strip_prefix("config_file=")) {
                conf = Some(c.to_string());
            }
            i += 1;
        } else if let Some(c) = a
            .strip_prefix("--config-file=")
            .or_else(|| a.strip_prefix("--config_file="))
        {
            conf = Some(c.to_string());
        }
        i += 1;
    }
    Some((data?, conf))
}

/// Settings given on a postmaster's command line, in order: `-c name=value`, `-cname=value`,
/// `--name=value` (dashes in the name read as underscores) and `-B buffers`.
pub(crate) fn cmdline_settings(args: &[String]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut push = |kv: &str| {
        if let Some((k, v)) = kv.split_once('=') {
            out.push((
                k.trim().replace('-', "_").to_ascii_lowercase(),
                v.trim().to_string(),
            ));
        }
    };
    let mut i = 1;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "-c" || a == "-B" {
            if let Some(v) = args.get(i + 1) {
                if a == "-B" {
                    push(&format!("shared_buffers={v}"));
                } else {
                    push(v);
                }
            }
            i += 1;
        } else if let Some(kv) = a.strip_prefix("-c") {
            push(kv);
        } else if let Some(n) = a.strip_prefix("-B") {
            push(&format!("shared_buffers={n}"));
        } else if let Some(kv) = a.strip_prefix("--")
            && kv.contains('=')
        {
            push(kv);
        }
        i += 1;
    }
    out
}

/// Runs the check on every postmaster.
pub(crate) fn run(ctx: &Ctx, found: &mut Found) {
    let mem = Memory::read(ctx);
    for p in &ctx.procs.list {
        if !matches!(p.status.name.as_str(), "postgres" | "postmaster") {
            continue;
        }
        let Some((data, conf)) = locations(p) else {
            continue;
        };
        let Some(settings) = read_settings(ctx, p, &data, conf, found) else {
            continue;
        };
        let (buffers_text, buffers_src) = settings
            .get("shared_buffers")
            .unwrap_or(("128MB", "the default"));
        let Some(buffers) = pg_memory(buffers_text) else {
            found.skip(
                CHECK,
                format!(
                    "could not read shared_buffers = {buffers_text:?} in {buffers_src} (not a size)"
                ),
            );
            continue;
        };
        let cluster = Cluster {
            p,
            subject: format!("{} (cluster {data})", p.subject()),
            data,
            buffers,
            ev_buffers: Evidence::new(
                "shared_buffers",
                format!("{buffers_text} ({})", bytes(buffers)),
                buffers_src,
            ),
        };
        let (huge, huge_src) = settings.get("huge_pages").unwrap_or(("try", "the default"));
        huge_pages_unused(&cluster, huge, huge_src, &mem, found);
        small_buffers(&cluster, &mem, found);
    }
}

/// The machine's memory as the checks need it, from `/proc/meminfo`.
struct Memory {
    total: u64,
    huge_total: u64,
    /// Bytes.
    huge_size: u64,
}

impl Memory {
    fn read(ctx: &Ctx) -> Memory {
        let meminfo = perfpilot_sys::stat::read_meminfo(ctx.fs).unwrap_or_default();
        Memory {
            total: meminfo.get("MemTotal").copied().unwrap_or(0),
            huge_total: meminfo.get("HugePages_Total").copied().unwrap_or(0),
            // Hugepagesize is in kB in meminfo, which read_meminfo turns into bytes.
            huge_size: meminfo
                .get("Hugepagesize")
                .copied()
                .unwrap_or(2 << 20)
                .max(1),
        }
    }
}

/// One running cluster and its shared_buffers.
struct Cluster<'a> {
    p: &'a Proc,
    data: String,
    subject: String,
    buffers: u64,
    ev_buffers: Evidence,
}

/// A cluster's settings: its configuration file (`conf`, else `DATA/postgresql.conf`), then
/// `postgresql.auto.conf` (ALTER SYSTEM), then the postmaster's command line, each overriding
/// the one before; `None` when neither file could be read.
fn read_settings(
    ctx: &Ctx,
    p: &Proc,
    data: &str,
    conf: Option<String>,
    found: &mut Found,
) -> Option<Settings> {
    let main = conf.unwrap_or_else(|| format!("{data}/postgresql.conf"));
    let auto = format!("{data}/postgresql.auto.conf");
    let mut settings = Settings {
        values: BTreeMap::new(),
    };
    let mut read_any = false;
    // postgresql.auto.conf (ALTER SYSTEM) is read last and wins; it may not exist.
    for (file, optional) in [(&main, false), (&auto, true)] {
        match ctx.fs.read_opt(file) {
            Ok(Some(text)) => {
                read_any = true;
                for (k, v) in parse_conf(&text) {
                    settings.values.insert(k, (v, file.clone()));
                }
            }
            Ok(None) if optional => {}
            Ok(None) => found.skip(CHECK, format!("could not read {file} (absent)")),
            Err(e) => found.skip_err(CHECK, &e),
        }
    }
    if !read_any {
        return None;
    }
    // The command line overrides both files.
    for (k, v) in cmdline_settings(&p.cmdline) {
        settings
            .values
            .insert(k, (v, "the postmaster's command line".to_string()));
    }
    Some(settings)
}

/// Large shared_buffers in small pages: `huge_pages = off`, or huge pages allowed but none
/// reserved.
fn huge_pages_unused(c: &Cluster, huge: &str, huge_src: &str, mem: &Memory, found: &mut Found) {
    let huge = huge.to_ascii_lowercase();
    let data = &c.data;
    let pages = (c.buffers as f64 * 1.1 / mem.huge_size as f64).ceil() as u64;
    let ev_huge = Evidence::new("huge_pages", &huge, huge_src);
    let reserve = format!(
        "sudo sysctl -w vm.nr_hugepages={pages} && echo 'vm.nr_hugepages = {pages}' | sudo tee /etc/sysctl.d/90-perfpilot-postgres.conf   # PostgreSQL 15+: postgres -C shared_memory_size_in_huge_pages -D {data} gives the exact count"
    );
    if c.buffers >= LARGE_BUFFERS && (huge == "off" || (huge != "on" && mem.huge_total == 0)) {
        let off = huge == "off";
        found.add(super::Finding {
            evidence: vec![
                c.ev_buffers.clone(),
                ev_huge,
                Evidence::new("HugePages_Total", mem.huge_total.to_string(), "/proc/meminfo"),
            ],
            why: WHY_PG.into(),
            effect: "the buffer cache in huge pages: smaller page tables in every backend, fewer TLB misses".into(),
            apply: if off {
                format!("ALTER SYSTEM SET huge_pages = 'try';   -- then reserve them: {reserve}; and restart PostgreSQL")
            } else {
                format!("{reserve}; then restart PostgreSQL (huge_pages = try uses them when there are enough)")
            },
            verify: Verify::Observe {
                command: "grep -E 'HugePages_(Total|Free|Rsvd)' /proc/meminfo   # after the restart".into(),
                expect: "HugePages_Rsvd or Total − Free covering shared_buffers".into(),
            },
            cmdline: Some(c.p.cmdline_joined()),
            ..base(
                if off { "postgres.huge-pages-off" } else { "postgres.huge-pages-unreserved" },
                c.subject.clone(),
                if off { Severity::Warning } else { Severity::Info },
                if off {
                    format!("shared_buffers of {} in small pages: huge_pages = off", bytes(c.buffers))
                } else {
                    format!("shared_buffers of {} in small pages: huge_pages = {huge} but none are reserved", bytes(c.buffers))
                },
            )
        });
    }
}

/// The default shared_buffers on a machine with room for far more.
fn small_buffers(c: &Cluster, mem: &Memory, found: &mut Found) {
    if c.buffers <= DEFAULT_BUFFERS && mem.total >= ROOMY {
        let quarter = (mem.total / 4) >> 20;
        found.add(super::Finding {
            evidence: vec![c.ev_buffers.clone(), Evidence::new("MemTotal", bytes(mem.total), "/proc/meminfo")],
            why: WHY_PG.into(),
            effect: "more of the working set in PostgreSQL's own cache: fewer reads through the kernel".into(),
            apply: format!("ALTER SYSTEM SET shared_buffers = '{quarter}MB';   -- then restart PostgreSQL"),
            verify: Verify::Observe {
                command: "psql -c \"SELECT sum(blks_hit)::float / nullif(sum(blks_hit + blks_read), 0) FROM pg_stat_database\"   # before and after, under the same load".into(),
                expect: "a higher hit ratio".into(),
            },
            cmdline: Some(c.p.cmdline_joined()),
            ..base(
                "postgres.shared-buffers-small",
                c.subject.clone(),
                Severity::Info,
                format!("shared_buffers is {} on a machine with {}", bytes(c.buffers), bytes(mem.total)),
            )
        });
    }
}

#[cfg(test)]
mod tests {
    use super::{cmdline_settings, parse_conf, pg_memory};

    #[test]
    fn command_line_settings_are_read_in_every_spelling() {
        let args: Vec<String> = [
            "/usr/lib/postgresql/15/bin/postgres",
            "-D",
            "/data",
            "-c",
            "shared_buffers=2GB",
            "-chuge_pages=off",
            "--max-connections=50",
            "-B",
            "4096",
            "-c",
            "config_file=/etc/pg.conf",
        ]
        .map(String::from)
        .to_vec();
        let v = cmdline_settings(&args);
        assert_eq!(
            v,
            [
                ("shared_buffers", "2GB"),
                ("huge_pages", "off"),
                ("max_connections", "50"),
                ("shared_buffers", "4096"),
                ("config_file", "/etc/pg.conf"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
        );
    }

    #[test]
    fn conf_lines_give_names_and_values_without_quotes_or_comments() {
        let t = "# c\nshared_buffers = 8GB   # mem\nhuge_pages='off'\nmax_connections 100\n";
        let v = parse_conf(t);
        assert_eq!(v[0], ("shared_buffers".into(), "8GB".into()));
        assert_eq!(v[1], ("huge_pages".into(), "off".into()));
        assert_eq!(v[2], ("max_connections".into(), "100".into()));
    }

    #[test]
    fn memory_settings_take_units_and_bare_numbers_are_pages() {
        assert_eq!(pg_memory("128MB"), Some(128 << 20));
        assert_eq!(pg_memory("8GB"), Some(8 << 30));
        assert_eq!(pg_memory("16384"), Some(16384 * 8192));
        assert_eq!(pg_memory("12 parsecs"), None);
    }
}

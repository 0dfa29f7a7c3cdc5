//! Detection: which candidates a process gets, in which order, and what the config changes.

use super::*;

fn id(comm: &str, uid: u32) -> Identity {
    Identity {
        comm: comm.into(),
        exe: None,
        cmdline: comm.into(),
        uid,
        gid: uid,
    }
}

fn tcp(s: &str) -> Endpoint {
    Endpoint::Tcp(s.parse().unwrap())
}

fn unix(s: &str) -> Endpoint {
    Endpoint::Unix(s.into())
}

fn kinds_and_endpoints(c: &[Candidate]) -> Vec<(PresetKind, String)> {
    c.iter().map(|c| (c.kind, c.endpoint.to_string())).collect()
}

fn preset(toml_text: &str) -> PresetConfig {
    let p: PresetConfig = toml::from_str(toml_text).unwrap();
    p.validate(1).unwrap();
    p
}

#[test]
fn the_table_has_one_row_per_kind_in_order() {
    for (i, k) in PresetKind::ALL.iter().enumerate() {
        assert_eq!(PRESETS[i].kind, *k);
        assert_eq!(k.preset().kind, *k);
        assert_eq!(k.as_str().parse::<PresetKind>().unwrap(), *k);
        assert_eq!(k.to_string(), k.as_str());
    }
    assert_eq!("valkey".parse::<PresetKind>().unwrap(), PresetKind::Redis);
    assert!("oracle".parse::<PresetKind>().is_err());
}

#[test]
fn postgres_is_tried_on_its_socket_first_as_its_own_user_then_tcp_then_prometheus() {
    let c = detect(
        &id("postgres", 104),
        &[
            tcp("0.0.0.0:5432"),
            tcp("[::]:5432"),
            unix("/var/run/postgresql/.s.PGSQL.5432"),
        ],
        &[],
    );
    assert_eq!(
        kinds_and_endpoints(&c),
        [
            (
                PresetKind::Postgres,
                "/var/run/postgresql/.s.PGSQL.5432".into()
            ),
            (PresetKind::Postgres, "127.0.0.1:5432".into()),
            (PresetKind::Prometheus, "127.0.0.1:5432".into()),
        ]
    );
    assert_eq!(c[0].settings.run_as, Some((104, 104)));
    assert_eq!(c[1].settings.run_as, None, "TCP is not peer-authenticated");
    assert_eq!(
        c[0].why,
        "postgres is postgresql by its name; listens on /var/run/postgresql/.s.PGSQL.5432"
    );
    assert!(c[0].describe().contains("xact_commit + xact_rollback"));
}

#[test]
fn a_server_with_another_name_is_recognised_by_its_socket_or_port() {
    let c = detect(&id("pg-wrapper", 0), &[unix("/tmp/.s.PGSQL.6000")], &[]);
    assert_eq!(c[0].kind, PresetKind::Postgres);
    assert!(c[0].why.contains("socket"), "{}", c[0].why);
    let c = detect(&id("cache", 0), &[tcp("127.0.0.1:11211")], &[]);
    assert_eq!(c[0].kind, PresetKind::Memcached);
    assert!(c[0].why.contains("port"), "{}", c[0].why);
    // A Unix socket of any name says nothing about a process not recognised by name.
    let c = detect(&id("app", 0), &[unix("/run/app/redis.sock")], &[]);
    assert!(c.is_empty(), "{c:?}");
}

#[test]
fn redis_is_recognised_by_its_executable_and_reads_well_known_port_first() {
    let mut who = id("redis-serv", 0);
    who.exe = Some("/usr/bin/redis-server".into());
    let c = detect(
        &who,
        &[
            tcp("127.0.0.1:16379"),
            tcp("127.0.0.1:6379"),
            unix("/run/redis/redis-server.sock"),
        ],
        &[],
    );
    assert_eq!(
        kinds_and_endpoints(&c)[..3],
        [
            (PresetKind::Redis, "/run/redis/redis-server.sock".into()),
            (PresetKind::Redis, "127.0.0.1:6379".into()),
            (PresetKind::Redis, "127.0.0.1:16379".into()),
        ]
    );
    assert!(c[0].why.contains("runs redis-server"), "{}", c[0].why);
}

#[test]
fn nginx_gets_each_tcp_listener_and_mysql_is_detected_too() {
    let c = detect(
        &id("nginx", 33),
        &[tcp("0.0.0.0:80"), tcp("0.0.0.0:8080")],
        &[],
    );
    assert_eq!(
        kinds_and_endpoints(&c),
        [
            (PresetKind::Nginx, "127.0.0.1:80".into()),
            (PresetKind::Nginx, "127.0.0.1:8080".into()),
            (PresetKind::Prometheus, "127.0.0.1:80".into()),
            (PresetKind::Prometheus, "127.0.0.1:8080".into()),
        ]
    );
    let c = detect(
        &id("mariadbd", 106),
        &[unix("/run/mysqld/mysqld.sock"), tcp("127.0.0.1:3306")],
        &[],
    );
    assert_eq!(c[0].kind, PresetKind::Mysql);
    assert_eq!(c[0].endpoint, unix("/run/mysqld/mysqld.sock"));
}

#[test]
fn a_process_without_listeners_gets_nothing() {
    assert!(detect(&id("postgres", 104), &[], &[]).is_empty());
    assert!(detect(&id("worker", 0), &[unix("/tmp/x.sock")], &[]).is_empty());
}

#[test]
fn a_config_entry_with_a_url_comes_first_with_its_metric() {
    let o = preset(
        "kind = \"prometheus\"\nmatch = { comm = \"myapp\" }\n\
         url = \"http://localhost:9100/stats/metrics\"\nmetric = \"myapp_jobs_total\"\n",
    );
    let c = detect(
        &id("myapp", 1000),
        &[tcp("0.0.0.0:8080")],
        std::slice::from_ref(&o),
    );
    assert_eq!(
        kinds_and_endpoints(&c),
        [
            (PresetKind::Prometheus, "127.0.0.1:9100".into()),
            (PresetKind::Prometheus, "127.0.0.1:8080".into()),
        ]
    );
    assert_eq!(c[0].settings.path.as_deref(), Some("/stats/metrics"));
    assert!(c[0].why.starts_with("[[preset]] #1"), "{}", c[0].why);
    assert_eq!(c[1].settings.metric.as_deref(), Some("myapp_jobs_total"));
    // Another process is not matched.
    let c = detect(&id("other", 1000), &[tcp("0.0.0.0:8080")], &[o]);
    assert_eq!(
        kinds_and_endpoints(&c),
        [(PresetKind::Prometheus, "127.0.0.1:8080".into())]
    );
    assert_eq!(c[0].settings.metric, None);
}

#[test]
fn credentials_without_an_address_go_to_the_detected_candidates() {
    let o = preset("kind = \"postgresql\"\nuser = \"monitor\"\npassword = \"pw\"\n");
    let c = detect(
        &id("postgres", 104),
        &[unix("/run/postgresql/.s.PGSQL.5432"), tcp("127.0.0.1:5432")],
        &[o],
    );
    assert_eq!(c[0].settings.user.as_deref(), Some("monitor"));
    assert_eq!(c[0].settings.password.as_deref(), Some("pw"));
    assert_eq!(
        c[0].settings.run_as, None,
        "a password replaces peer authentication"
    );
    assert_eq!(c[1].settings.user.as_deref(), Some("monitor"));
}

#[test]
fn a_match_makes_an_unrecognised_process_a_kind_and_enabled_false_removes_one() {
    let o = preset("kind = \"redis\"\nmatch = { comm = \"kvstore\" }\n");
    let c = detect(&id("kvstore", 0), &[tcp("127.0.0.1:7000")], &[o]);
    assert_eq!(c[0].kind, PresetKind::Redis);
    assert!(
        c[0].why.contains("[[preset]] #1 matches kvstore"),
        "{}",
        c[0].why
    );
    let off = preset("kind = \"prometheus\"\nenabled = false\n");
    let c = detect(&id("redis-server", 0), &[tcp("127.0.0.1:6379")], &[off]);
    assert_eq!(
        kinds_and_endpoints(&c),
        [(PresetKind::Redis, "127.0.0.1:6379".into())]
    );
}

#[test]
fn wildcard_addresses_are_reached_through_loopback() {
    assert_eq!(tcp("0.0.0.0:1").reachable(), tcp("127.0.0.1:1"));
    assert_eq!(tcp("[::]:1").reachable(), tcp("[::1]:1"));
    assert_eq!(tcp("10.0.0.5:1").reachable(), tcp("10.0.0.5:1"));
}

#[test]
fn error_messages_name_the_preset_the_endpoint_and_the_field_to_set() {
    let at = At {
        kind: PresetKind::Redis,
        endpoint: tcp("127.0.0.1:6379"),
    };
    let e = PresetError::Auth {
        at: at.clone(),
        field: "password",
        why: "the server requires a password".into(),
    };
    assert_eq!(
        e.to_string(),
        "redis preset at 127.0.0.1:6379: the server requires a password; set `password` in a \
         [[preset]] with kind = \"redis\""
    );
    let e = PresetError::Timeout {
        at,
        timeout: Duration::from_secs(2),
    };
    assert!(
        e.to_string()
            .starts_with("redis preset at 127.0.0.1:6379: no answer within 2"),
        "{e}"
    );
    assert_eq!(snippet(b"abcdef", 3), "abc…");
    assert_eq!(snippet(b"abc", 3), "abc");
}

#[test]
fn a_candidate_shown_as_json_does_not_carry_its_password() {
    let o = preset("kind = \"redis\"\npassword = \"s3cret\"\n");
    let c = detect(&id("redis-server", 0), &[tcp("127.0.0.1:6379")], &[o]);
    assert_eq!(c[0].settings.password.as_deref(), Some("s3cret"));
    let json = serde_json::to_string(&c[0]).unwrap();
    assert!(!json.contains("s3cret"), "{json}");
}

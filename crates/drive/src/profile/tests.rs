use super::*;

const BASE: &str = "http://127.0.0.1:8080";

fn parse(text: &str) -> Result<RequestProfile, DriveError> {
    RequestProfile::parse(text, Path::new("mix.csv"), Some(BASE))
}

/// The error's text, which must name the file, the line and the field.
fn error(text: &str, base: Option<&str>) -> String {
    RequestProfile::parse(text, Path::new("mix.csv"), base)
        .unwrap_err()
        .to_string()
}

#[test]
fn a_profile_parses_its_rows_joins_paths_to_the_base_and_draws_placeholders() {
    let p = parse(
        "name,weight,method,url,body_bytes,header:content-type\n\
         # a comment line is skipped\n\
         get,90,get,/docs/doc-{{rand:1-20}},,\n\
         search,5,GET,/search?dept=bench,,\n\
         put,5,PUT,/docs/new-{{seq}},2048,application/octet-stream\n",
    )
    .unwrap();
    assert_eq!(p.origin, BASE);
    assert_eq!(p.kinds.len(), 3);
    let (get, put) = (&p.kinds[0], &p.kinds[2]);
    assert_eq!((get.method, get.line), (Method::Get, 3));
    assert_eq!(get.url, "http://127.0.0.1:8080/docs/doc-{{rand:1-20}}");
    assert!(get.body.is_none() && get.headers.is_empty());
    assert_eq!(put.body.as_ref().map(Bytes::len), Some(2048));
    assert_eq!(
        put.headers,
        [(
            "content-type".to_string(),
            "application/octet-stream".to_string()
        )]
    );
    assert!((p.share(0) - 0.9).abs() < 1e-12);
    let mut rng = Rng::new(1);
    for seq in 0..200 {
        let (i, path) = p.draw(seq, &mut rng);
        match i {
            0 => {
                let n: u32 = path.strip_prefix("/docs/doc-").unwrap().parse().unwrap();
                assert!((1..=20).contains(&n), "{path}");
            }
            1 => assert_eq!(path, "/search?dept=bench"),
            _ => assert_eq!(path, format!("/docs/new-{seq}")),
        }
    }
}

#[test]
fn absolute_urls_need_no_base_and_a_base_path_prefixes_the_rows() {
    let p = RequestProfile::parse(
        "name,weight,method,url\na,1,HEAD,http://127.0.0.1:9/x?y=1\n",
        Path::new("p.csv"),
        None,
    )
    .unwrap();
    assert_eq!(p.origin, "http://127.0.0.1:9");
    assert_eq!(p.draw(0, &mut Rng::new(0)).1, "/x?y=1");
    let p = RequestProfile::parse(
        "name,weight,method,url\na,1,GET,/docs/1\n",
        Path::new("p.csv"),
        Some("http://127.0.0.1:9/api/"),
    )
    .unwrap();
    assert_eq!(p.draw(0, &mut Rng::new(0)).1, "/api/docs/1");
}

#[test]
fn a_missing_file_names_it_and_says_what_the_file_must_hold() {
    let e = RequestProfile::from_csv(Path::new("/nonexistent/mix.csv"), None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("/nonexistent/mix.csv") && e.contains("cannot read") && e.contains("header"),
        "{e}"
    );
}

#[test]
fn missing_header_columns_are_named() {
    let e = error("name,method\na,GET\n", Some(BASE));
    assert!(
        e.contains("mix.csv, line 1, header: missing columns weight, url"),
        "{e}"
    );
    let e = error("name,weight,method,url,bodybytes\n", Some(BASE));
    assert!(e.contains("unknown column \"bodybytes\""), "{e}");
}

#[test]
fn a_weight_that_is_not_a_positive_number_names_its_line() {
    for (w, want) in [
        ("0", "is not positive"),
        ("-3", "is not positive"),
        ("lots", "is not a number"),
        ("", "is not a number"),
    ] {
        let e = error(
            &format!("name,weight,method,url\nok,1,GET,/a\nbad,{w},GET,/b\n"),
            Some(BASE),
        );
        assert!(
            e.contains("mix.csv, line 3, weight:") && e.contains(want),
            "{w}: {e}"
        );
    }
}

#[test]
fn an_unknown_method_lists_the_known_ones() {
    let e = error("name,weight,method,url\na,1,FETCH,/a\n", Some(BASE));
    assert!(
        e.contains("line 2, method: unknown method \"FETCH\": use GET, HEAD, PUT, POST or DELETE"),
        "{e}"
    );
}

#[test]
fn a_bad_placeholder_names_the_url_and_the_generators() {
    for url in [
        "/d/{{rand:9-1}}",
        "/d/{{rand:1-x}}",
        "/d/{{rand:1-2",
        "/d/{{id}}",
    ] {
        let e = error(
            &format!("name,weight,method,url\na,1,GET,{url}\n"),
            Some(BASE),
        );
        assert!(
            e.contains("line 2, url: bad placeholder") && e.contains("{{rand:A-B}}"),
            "{url}: {e}"
        );
    }
    let e = error(
        "name,weight,method,url\na,1,GET,http://h{{rand:1-2}}/x\n",
        None,
    );
    assert!(e.contains("not in the host"), "{e}");
}

#[test]
fn an_empty_profile_says_to_add_rows() {
    let e = error("name,weight,method,url\n", Some(BASE));
    assert!(e.contains("mix.csv: has no rows"), "{e}");
    let e = error("", Some(BASE));
    assert!(
        e.contains("missing columns name, weight, method, url"),
        "{e}"
    );
}

#[test]
fn a_body_file_that_cannot_be_read_names_the_file_and_line() {
    let e = error(
        "name,weight,method,url,body_file\nput,1,PUT,/d/1,no-such-body.bin\n",
        Some(BASE),
    );
    assert!(
        e.contains("line 2, body_file: cannot read no-such-body.bin"),
        "{e}"
    );
}

#[test]
fn a_body_file_is_read_from_the_profiles_directory() {
    let dir = std::env::temp_dir().join(format!("pp-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("doc.bin"), b"0123456789").unwrap();
    let csv = dir.join("mix.csv");
    std::fs::write(
        &csv,
        "name,weight,method,url,body_file\nput,1,POST,/docs,doc.bin\n",
    )
    .unwrap();
    let p = RequestProfile::from_csv(&csv, Some(BASE));
    let _ = std::fs::remove_dir_all(&dir);
    let p = p.unwrap();
    assert_eq!(p.kinds[0].body.as_deref(), Some(&b"0123456789"[..]));
}

#[test]
fn a_body_on_a_get_or_both_body_columns_are_refused() {
    let e = error(
        "name,weight,method,url,body_bytes\nget,1,GET,/a,10\n",
        Some(BASE),
    );
    assert!(
        e.contains("line 2, body_bytes: a GET request sends no body"),
        "{e}"
    );
    let e = error(
        "name,weight,method,url,body_bytes,body_file\nput,1,PUT,/a,10,x.bin\n",
        Some(BASE),
    );
    assert!(e.contains("both set"), "{e}");
    let e = error(
        "name,weight,method,url,body_bytes\nput,1,PUT,/a,ten\n",
        Some(BASE),
    );
    assert!(
        e.contains("body_bytes: \"ten\" is not a whole number"),
        "{e}"
    );
}

#[test]
fn a_path_without_a_base_url_and_a_base_url_no_row_uses_are_ambiguous() {
    let e = error("name,weight,method,url\na,1,GET,/a\n", None);
    assert!(
        e.contains("line 2, url: /a is a path but no base URL was given"),
        "{e}"
    );
    let e = error(
        "name,weight,method,url\na,1,GET,http://127.0.0.1:9/a\n",
        Some(BASE),
    );
    assert!(
        e.contains("the URL http://127.0.0.1:8080 on the command line would not be used"),
        "{e}"
    );
}

#[test]
fn rows_for_two_servers_or_with_one_name_twice_are_refused() {
    let e = error(
        "name,weight,method,url\na,1,GET,/a\nb,1,GET,http://127.0.0.1:9/b\n",
        Some(BASE),
    );
    assert!(
        e.contains(
            "line 3, url: goes to http://127.0.0.1:9 but line 2 goes to http://127.0.0.1:8080"
        ),
        "{e}"
    );
    let e = error(
        "name,weight,method,url\na,1,GET,/a\na,2,GET,/b\n",
        Some(BASE),
    );
    assert!(e.contains("line 3, name: \"a\" is already the name"), "{e}");
}

#[test]
fn a_row_with_too_few_fields_or_a_bad_header_names_its_line() {
    let e = error("name,weight,method,url\na,1,GET\n", Some(BASE));
    assert!(e.contains("mix.csv, line 2, row:"), "{e}");
    let e = error(
        "name,weight,method,url,header:content-length\na,1,GET,/a,5\n",
        Some(BASE),
    );
    assert!(e.contains("set by the driver"), "{e}");
}

//! PMML parsing and scoring against known outputs, the model cache, the HTTP surface and its
//! error paths.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use perfpilot_scoring::pmml::{self, Value};
use perfpilot_scoring::{Service, ServiceConfig, serve};

fn models_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/scoring/models")
}

fn iris(sl: f64, pl: f64, pw: f64) -> HashMap<String, Value> {
    [
        ("sepal length (cm)", sl),
        ("sepal width (cm)", 3.0),
        ("petal length (cm)", pl),
        ("petal width (cm)", pw),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), Value::Num(v)))
    .collect()
}

/// Rows of Fisher's iris data (sepal length, petal length, petal width, class 0/1/2) chosen so
/// that every leaf of the scikit-learn tree is reached.
const IRIS_ROWS: [(f64, f64, f64, &str); 13] = [
    (5.1, 1.4, 0.2, "0"),
    (7.0, 4.7, 1.4, "1"),
    (6.4, 4.5, 1.5, "1"),
    (6.9, 4.9, 1.5, "1"),
    (5.9, 4.8, 1.8, "1"),
    (6.7, 5.0, 1.7, "1"),
    (6.0, 5.1, 1.6, "1"),
    (4.9, 4.5, 1.7, "2"),
    (6.0, 5.0, 1.5, "2"),
    (7.2, 5.8, 1.6, "2"),
    (6.3, 5.1, 1.5, "2"),
    (6.0, 4.8, 1.8, "2"),
    (6.3, 6.0, 2.5, "2"),
];

#[test]
fn sklearn2pmml_tree_reproduces_the_known_iris_classes() {
    let model = pmml::load(&models_dir().join("tree-iris.pmml")).unwrap();
    assert_eq!(model.target.as_deref(), Some("Class"));
    for (sl, pl, pw, class) in IRIS_ROWS {
        let p = model.score(&iris(sl, pl, pw)).unwrap();
        assert_eq!(p.value, Value::Str(class.to_string()), "row {sl} {pl} {pw}");
        assert_eq!(p.probabilities[class], 1.0);
    }
}

#[test]
fn logistic_regression_matches_the_formula() {
    let model = pmml::load(&models_dir().join("iris-logistic.pmml")).unwrap();
    for (sl, pl, pw, _) in IRIS_ROWS {
        let p = model.score(&iris(sl, pl, pw)).unwrap();
        let expected = 1.0 / (1.0 + (-(-45.27 + 5.75 * pl + 10.45 * pw)).exp());
        assert!((p.probabilities["yes"] - expected).abs() < 1e-12);
        assert!((p.probabilities["no"] - (1.0 - expected)).abs() < 1e-12);
        let label = if expected > 0.5 { "yes" } else { "no" };
        assert_eq!(p.value, Value::Str(label.to_string()));
    }
    let p = model.score(&iris(6.3, 6.0, 2.5)).unwrap();
    assert_eq!(p.value, Value::Str("yes".to_string()));
}

#[test]
fn majority_vote_and_sum_ensembles() {
    let forest = pmml::load(&models_dir().join("iris-forest.pmml")).unwrap();
    let p = forest.score(&iris(7.0, 4.7, 1.4)).unwrap();
    assert_eq!(p.value, Value::Str("versicolor".to_string()));
    assert!((p.probabilities["versicolor"] - 2.0 / 3.0).abs() < 1e-12);
    assert!((p.probabilities["virginica"] - 1.0 / 3.0).abs() < 1e-12);
    let p = forest.score(&iris(5.1, 1.4, 0.2)).unwrap();
    assert_eq!(p.value, Value::Str("setosa".to_string()));
    assert_eq!(p.probabilities["setosa"], 1.0);

    let boost = pmml::load(&models_dir().join("sepal-boost.pmml")).unwrap();
    let Value::Num(v) = boost.score(&iris(6.3, 6.0, 2.5)).unwrap().value else {
        panic!("regression gives a number");
    };
    assert!((v - 6.75).abs() < 1e-12, "{v}");
    let Value::Num(v) = boost.score(&iris(5.1, 6.5, 0.2)).unwrap().value else {
        panic!("regression gives a number");
    };
    assert!((v - (4.3 + 0.4 * 6.5 - 0.1 + 0.2)).abs() < 1e-12, "{v}");
}

#[test]
fn average_and_softmax_regression() {
    let text = r#"<PMML version="4.4"><DataDictionary/>
      <MiningModel functionName="classification"><MiningSchema><MiningField name="x"/></MiningSchema>
        <Segmentation multipleModelMethod="average">
          <Segment><True/><RegressionModel functionName="classification" normalizationMethod="softmax">
            <MiningSchema><MiningField name="x"/></MiningSchema>
            <RegressionTable intercept="0" targetCategory="a"><NumericPredictor name="x" coefficient="1"/></RegressionTable>
            <RegressionTable intercept="0" targetCategory="b"/>
          </RegressionModel></Segment>
          <Segment><True/><TreeModel functionName="classification"><MiningSchema><MiningField name="x"/></MiningSchema>
            <Node><True/><ScoreDistribution value="a" recordCount="1"/><ScoreDistribution value="b" recordCount="3"/>
              <Node score="b"><SimplePredicate field="x" operator="greaterThan" value="100"/></Node>
            </Node></TreeModel></Segment>
        </Segmentation></MiningModel></PMML>"#;
    // The tree's root has no score: with x = 2 no child matches and there is no prediction.
    let m = pmml::parse(text, Path::new("inline.pmml")).unwrap();
    let rec: HashMap<String, Value> = [("x".to_string(), Value::Num(2.0))].into();
    assert!(m.score(&rec).is_err());
    let rec: HashMap<String, Value> = [("x".to_string(), Value::Num(200.0))].into();
    let p = m.score(&rec).unwrap();
    // softmax(200, 0) ≈ (1, 0); the tree's leaf has no distribution, so only the regression
    // contributes probabilities, averaged over 2 segments.
    assert!((p.probabilities["a"] - 0.5).abs() < 1e-9, "{p:?}");
}

#[test]
fn malformed_pmml_names_file_and_element() {
    let bad = r#"<PMML version="4.4">
  <RegressionModel functionName="regression">
    <MiningSchema><MiningField name="x"/></MiningSchema>
    <RegressionTable>
      <NumericPredictor name="x" coefficient="1"/>
    </RegressionTable>
  </RegressionModel>
</PMML>"#;
    let err = pmml::parse(bad, Path::new("models/broken.pmml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("models/broken.pmml"), "{err}");
    assert!(err.contains("<RegressionTable>"), "{err}");
    assert!(err.contains("line 4"), "{err}");
    assert!(err.contains("intercept"), "{err}");

    let err = pmml::parse(
        "<PMML><NeuralNetwork functionName=\"regression\"/></PMML>",
        Path::new("nn.pmml"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("<NeuralNetwork>") && err.contains("unsupported"),
        "{err}"
    );
    let err = pmml::parse("<PMML><oops></PMML>", Path::new("x.pmml"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("x.pmml") && err.contains("not well-formed"),
        "{err}"
    );
    let err = pmml::load(Path::new("/nonexistent/m.pmml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/m.pmml"), "{err}");
}

fn temp_models(extra: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "perfpilot-scoring-test-{}-{}",
        std::process::id(),
        extra.len()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["iris-logistic", "iris-forest", "tree-iris"] {
        std::fs::copy(
            models_dir().join(format!("{f}.pmml")),
            dir.join(format!("{f}.pmml")),
        )
        .unwrap();
    }
    for (name, text) in extra {
        std::fs::write(dir.join(format!("{name}.pmml")), text).unwrap();
    }
    dir
}

#[test]
fn cache_size_decides_hits_and_misses() {
    let dir = temp_models(&[]);
    let names = ["iris-logistic", "iris-forest", "tree-iris"];
    let small = Service::new(ServiceConfig {
        model_dir: dir.clone(),
        cache_size: 2,
        echo_inputs: false,
    });
    let big = Service::new(ServiceConfig {
        model_dir: dir.clone(),
        cache_size: 300,
        echo_inputs: false,
    });
    for _ in 0..5 {
        for n in names {
            assert_eq!(small.score(n, b"{\"petal length (cm)\": 5, \"petal width (cm)\": 2, \"sepal length (cm)\": 6}").0, 200);
            assert_eq!(big.score(n, b"{\"petal length (cm)\": 5, \"petal width (cm)\": 2, \"sepal length (cm)\": 6}").0, 200);
        }
    }
    // Round-robin over 3 models with room for 2: every request misses (LRU worst case).
    assert_eq!(small.cache.stats(), (0, 15, 13));
    assert_eq!(big.cache.stats(), (12, 3, 0));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn unknown_model_bad_record_and_broken_file_are_clear_errors() {
    let dir = temp_models(&[(
        "broken",
        "<PMML><TreeModel functionName=\"classification\"><MiningSchema/></TreeModel></PMML>",
    )]);
    let svc = Service::new(ServiceConfig {
        model_dir: dir.clone(),
        cache_size: 10,
        echo_inputs: true,
    });
    let (status, body) = svc.score("nope", b"{}");
    assert_eq!(status, 404);
    let e = body["error"].as_str().unwrap();
    assert!(
        e.contains("unknown model \"nope\"") && e.contains("iris-forest"),
        "{e}"
    );
    let (status, body) = svc.score("../etc/passwd", b"{}");
    assert_eq!(status, 404, "{body}");
    let (status, body) = svc.score("broken", b"{}");
    assert_eq!(status, 500);
    let e = body["error"].as_str().unwrap();
    assert!(
        e.contains("broken.pmml") && e.contains("<TreeModel>") && e.contains("Node"),
        "{e}"
    );
    let (status, body) = svc.score("iris-logistic", b"{\"petal length (cm)\": 5}");
    assert_eq!(status, 400);
    assert!(
        body["error"].as_str().unwrap().contains("petal width (cm)"),
        "{body}"
    );
    let (status, _) = svc.score("iris-logistic", b"not json");
    assert_eq!(status, 400);
    // Echo puts the inputs back into the response.
    let (status, body) = svc.score(
        "iris-logistic",
        b"{\"inputs\": {\"petal length (cm)\": 6, \"petal width (cm)\": 2.5}}",
    );
    assert_eq!(status, 200);
    assert_eq!(body["prediction"], "yes");
    assert_eq!(body["inputs"]["petal width (cm)"], 2.5);
    let _ = std::fs::remove_dir_all(dir);
}

fn http(addr: std::net::SocketAddr, method: &str, path: &str, body: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn http_scoring_and_metrics() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let svc = Arc::new(Service::new(ServiceConfig {
        model_dir: models_dir(),
        cache_size: 300,
        echo_inputs: false,
    }));
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(serve(listener, svc));
    let r = http(
        addr,
        "POST",
        "/score/tree-iris",
        r#"{"sepal length (cm)": 6.3, "petal length (cm)": 6.0, "petal width (cm)": 2.5}"#,
    );
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(r.contains(r#""prediction":"2""#), "{r}");
    assert!(!r.contains("inputs"), "{r}");
    let r = http(addr, "POST", "/score/missing", "{}");
    assert!(r.starts_with("HTTP/1.1 404"), "{r}");
    let r = http(addr, "GET", "/models", "");
    assert!(r.contains("tree-iris") && r.contains("iris-forest"), "{r}");
    let r = http(addr, "GET", "/metrics", "");
    assert!(r.contains("scoring_scores_total 1\n"), "{r}");
    assert!(
        r.contains("scoring_errors_total{kind=\"unknown_model\"} 1"),
        "{r}"
    );
    assert!(
        r.contains("scoring_request_duration_seconds_count 2"),
        "{r}"
    );
    assert!(
        r.contains("# TYPE scoring_request_duration_seconds histogram"),
        "{r}"
    );
}

/// Runs `scoring-model` with `args`, returning its exit status and stderr.
fn scoring_model(args: &[&str]) -> (std::process::ExitStatus, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_scoring-model"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn generated_ensembles_are_seeded_and_score_as_their_splits_say() {
    let dir = std::env::temp_dir().join(format!("perfpilot-scoring-model-{}", std::process::id()));
    let out = dir.to_str().unwrap();
    let gen_ = |name: &str, trees: &str, depth: &str, seed: &str| {
        let (st, err) = scoring_model(&[
            "--out", out, "--name", name, "--trees", trees, "--depth", depth, "--seed", seed,
        ]);
        assert!(st.success(), "{err}");
        std::fs::read_to_string(dir.join(format!("{name}.pmml"))).unwrap()
    };
    // The same arguments give the same model; another seed another one.
    let a = gen_("a", "20", "4", "7");
    assert_eq!(a, gen_("b", "20", "4", "7").replace("\"b\"", "\"a\""));
    assert_ne!(a, gen_("c", "20", "4", "8").replace("\"c\"", "\"a\""));
    let m = pmml::load(&dir.join("a.pmml")).unwrap();
    assert_eq!(a.matches("<Segment ").count(), 20);
    // Every leaf is a lessOrEqual/greaterThan pair at depth 4: 2^4 leaves a tree.
    assert_eq!(a.matches("<Node score=").count(), 20 * 16);
    let p = m.score(&iris(5.8, 4.3, 1.3)).unwrap();
    assert!(matches!(p.value, Value::Num(v) if v.is_finite()), "{p:?}");

    // One split: inputs on either side of its threshold score its two leaves.
    let one = gen_("one", "1", "1", "3");
    let field_at = one.find("field=\"").unwrap() + 7;
    let field = &one[field_at..field_at + one[field_at..].find('"').unwrap()];
    let at = one.find("value=\"").unwrap() + 7;
    let threshold: f64 = one[at..at + one[at..].find('"').unwrap()].parse().unwrap();
    let leaves: Vec<f64> = one
        .match_indices("score=\"")
        .map(|(i, _)| {
            let s = &one[i + 7..];
            s[..s.find('"').unwrap()].parse().unwrap()
        })
        .collect();
    assert_eq!(leaves.len(), 2);
    let m = pmml::load(&dir.join("one.pmml")).unwrap();
    for (x, leaf) in [(threshold - 0.01, leaves[0]), (threshold + 0.01, leaves[1])] {
        let mut rec = iris(5.8, 4.3, 1.3);
        rec.insert(field.to_string(), Value::Num(x));
        match m.score(&rec).unwrap().value {
            Value::Num(v) => assert!((v - leaf).abs() < 1e-9, "{field} = {x}: {v} vs leaf {leaf}"),
            other => panic!("{other:?}"),
        }
    }

    // Bad arguments are named.
    let (st, err) = scoring_model(&["--out", out, "--depth", "0"]);
    assert!(!st.success() && err.contains("--depth"), "{err}");
    let (st, err) = scoring_model(&["--out", out, "--name", "../x"]);
    assert!(!st.success() && err.contains("--name"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

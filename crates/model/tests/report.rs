//! What a model file answers in one call each (`ModelFile::solve_at`, `predict_sweep`,
//! `validation`, `render_for`), on the example models.

use std::path::{Path, PathBuf};

use perfpilot_model::{ModelError, ModelFile, SolveOptions, Sweep};

fn example(name: &str) -> ModelFile {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/models")
        .join(name);
    ModelFile::from_path(&path).expect("the example model reads")
}

#[test]
fn a_sweep_without_overrides_takes_the_files_predict_section() {
    let file = example("trade.toml");
    let spec = file.predict.clone().expect("trade.toml has [predict]");
    let report = file
        .predict_sweep(&Sweep::default(), &SolveOptions::default())
        .expect("predicts");
    assert_eq!(report.replicated, spec.replicate);
    assert_eq!(
        report.rows.len(),
        spec.clients.len() * spec.replicas.len().max(1)
    );
    assert_eq!(report.cost.len(), file.configurations.len());
    let asked = Sweep {
        clients: vec![20, 200],
        replicate: None,
        replicas: vec![1, 9],
    };
    let report = file
        .predict_sweep(&asked, &SolveOptions::default())
        .expect("predicts");
    let counts: Vec<(u32, u32)> = report
        .rows
        .iter()
        .map(|r| (r.replicas, r.clients))
        .collect();
    // trade.toml replicates `was`; the flags' replica counts replace the file's.
    assert_eq!(spec.replicate.as_deref(), Some("was"));
    assert_eq!(counts, [(1, 20), (1, 200), (9, 20), (9, 200)]);
}

#[test]
fn a_population_override_needs_a_single_class() {
    let (net, sol) = example("three-tier.toml")
        .solve_at(Some(5), &SolveOptions::default())
        .expect("solves");
    assert_eq!(net.classes[0].population, 5);
    assert_eq!(sol.classes[0].population, 5);
    let e = example("two-classes.json")
        .solve_at(Some(5), &SolveOptions::default())
        .unwrap_err();
    assert!(matches!(e, ModelError::File(m) if m.contains("single-class")));
}

#[test]
fn validation_needs_measured_points_and_marks_the_fitted_ones() {
    let e = example("three-tier.toml")
        .validation(&SolveOptions::default())
        .unwrap_err();
    assert!(e.to_string().contains("[[measurements]]"), "{e}");
    let file = example("trade.toml");
    let report = file
        .validation(&SolveOptions::default())
        .expect("validates");
    assert!(report.fit.is_some());
    assert_eq!(report.validation.rows.len(), file.measurements.len());
    for row in &report.validation.rows {
        assert_eq!(row.fitted, report.fitted_from.contains(&row.label));
    }
}

#[test]
fn the_output_format_follows_the_extension() {
    let file = example("three-tier.toml");
    let toml = file.render_for(Path::new("x.toml")).expect("toml");
    assert_eq!(ModelFile::parse_toml(&toml).expect("reads back"), file);
    assert!(
        file.render_for(Path::new("x.JMVA"))
            .expect("jmva")
            .contains("<ldstation")
    );
    let e = file.render_for(Path::new("out.yaml")).unwrap_err();
    assert!(e.to_string().contains("out.yaml"), "{e}");
}

#[test]
fn a_rendering_says_what_it_holds_and_what_jmva_leaves_out() {
    let file = example("trade.toml");
    let toml = file.render(Path::new("x.toml")).expect("toml");
    assert_eq!(toml.format, "TOML");
    assert_eq!(
        toml.holds,
        "1 class, 2 stations, 1 measured point, [fit], [predict], 4 configurations"
    );
    assert!(toml.left_out.is_empty());
    let jmva = file.render(Path::new("x.jmva")).expect("jmva");
    assert_eq!(jmva.format, "JMT JMVA XML");
    assert_eq!(
        jmva.holds,
        "the network: 1 class, 2 stations, demands fitted from 1 measured point"
    );
    assert_eq!(
        jmva.left_out,
        [
            "name and description",
            "1 measured point",
            "[fit]",
            "[predict]",
            "4 configurations"
        ]
    );
    assert_eq!(
        jmva.text,
        file.render_for(Path::new("x.jmva")).expect("jmva")
    );
}

//! Every bad input the issue lists gives an error naming the station, class, field or element.

mod common;

use common::{class, st};
use perfpilot_model::{LoadPoint, ModelError, ModelFile, Network, StationKind, fit, jmva};

fn msg(e: ModelError) -> String {
    e.to_string()
}

#[test]
fn negative_demand_names_station_and_class() {
    let e = Network::new(
        vec![st("db", StationKind::Queue, &[-0.1])],
        vec![class("web", 3, 0.0)],
    )
    .unwrap_err();
    assert!(matches!(e, ModelError::BadDemand { .. }));
    let m = msg(e);
    assert!(
        m.contains("`db`") && m.contains("`web`") && m.contains("-0.1"),
        "{m}"
    );
}

#[test]
fn nan_demand_is_rejected() {
    let e = Network::new(
        vec![st("db", StationKind::Queue, &[f64::NAN])],
        vec![class("c", 3, 0.0)],
    )
    .unwrap_err();
    assert!(matches!(e, ModelError::BadDemand { .. }), "{e}");
}

#[test]
fn zero_demand_everywhere_means_no_class_visits_it() {
    let e = Network::new(
        vec![
            st("app", StationKind::Queue, &[0.1]),
            st("idle", StationKind::Queue, &[0.0]),
        ],
        vec![class("c", 3, 0.0)],
    )
    .unwrap_err();
    assert_eq!(
        e,
        ModelError::NotVisited {
            station: "idle".into()
        }
    );
    assert!(msg(e).contains("`idle`"));
}

#[test]
fn zero_population_names_class() {
    let e = Network::new(
        vec![st("app", StationKind::Queue, &[0.1])],
        vec![class("batch", 0, 0.0)],
    )
    .unwrap_err();
    assert_eq!(
        e,
        ModelError::ZeroPopulation {
            class: "batch".into()
        }
    );
    assert!(msg(e).contains("`batch`"));
}

#[test]
fn multiserver_with_zero_servers() {
    let e = Network::new(
        vec![st("app", StationKind::MultiServer(0), &[0.1])],
        vec![class("c", 3, 0.0)],
    )
    .unwrap_err();
    assert_eq!(
        e,
        ModelError::ZeroServers {
            station: "app".into()
        }
    );
    let f = ModelFile::parse_toml(
        "[[classes]]\nname = \"c\"\npopulation = 2\n[[stations]]\nname = \"app\"\nkind = \"multiserver\"\nservers = 0\ndemand = 0.1\n",
    )
    .unwrap();
    assert_eq!(
        f.network().unwrap_err(),
        ModelError::ZeroServers {
            station: "app".into()
        }
    );
}

#[test]
fn bad_load_dependent_rates() {
    let e = Network::new(
        vec![st("ld", StationKind::LoadDependent(vec![1.0, 0.0]), &[0.1])],
        vec![class("c", 3, 0.0)],
    )
    .unwrap_err();
    assert!(matches!(e, ModelError::BadRate { index: 2, .. }), "{e}");
    let e = Network::new(
        vec![st("ld", StationKind::LoadDependent(vec![]), &[0.1])],
        vec![class("c", 3, 0.0)],
    )
    .unwrap_err();
    assert!(matches!(e, ModelError::NoRates { .. }));
}

#[test]
fn file_errors_name_the_field() {
    let base = "[[classes]]\nname = \"c\"\npopulation = 2\n[[stations]]\nname = \"app\"\n";
    let e = ModelFile::parse_toml(&format!("{base}demand = -1.0\n"))
        .unwrap()
        .network()
        .unwrap_err();
    assert!(msg(e).contains("demand"));
    let e = ModelFile::parse_toml(&format!("{base}service_time = 0.1\nvisits = -2.0\n"))
        .unwrap()
        .network()
        .unwrap_err();
    assert!(msg(e).contains("visits"), "visits error");
    let e = ModelFile::parse_toml(&format!("{base}demand = 0.0\n"))
        .unwrap()
        .network()
        .unwrap_err();
    assert_eq!(
        e,
        ModelError::NotVisited {
            station: "app".into()
        }
    );
    let e = ModelFile::parse_toml(&format!("{base}demand = {{ nobody = 1.0 }}\n"))
        .unwrap()
        .network()
        .unwrap_err();
    assert!(msg(e).contains("unknown class `nobody`"));
    let e = ModelFile::parse_toml(&format!("{base}\n"))
        .unwrap()
        .network()
        .unwrap_err();
    assert!(msg(e.clone()).contains("`app`") && msg(e).contains("demand"));
    // resolved() without measurements names the station too (it does not try to fit).
    let e = ModelFile::parse_toml(&format!(
        "{base}
"
    ))
    .unwrap()
    .resolved()
    .unwrap_err();
    assert!(msg(e).contains("station `app`: field `demand`"));
    let e = ModelFile::parse_toml(&format!("{base}demand = 0.1\nflavour = 3\n")).unwrap_err();
    assert!(msg(e).contains("flavour"));
    let e = ModelFile::parse_toml(
        "[[classes]]\nname = \"c\"\npopulation = 0\n[[stations]]\nname = \"a\"\ndemand = 1.0\n",
    )
    .unwrap()
    .network()
    .unwrap_err();
    assert_eq!(e, ModelError::ZeroPopulation { class: "c".into() });
}

fn point(util: &[(&str, f64)]) -> LoadPoint {
    LoadPoint {
        label: "run 1".into(),
        clients: 10,
        think_time: 1.0,
        throughput: 100.0,
        response_time: None,
        utilization: util.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        cores: Default::default(),
    }
}

#[test]
fn utilization_above_core_count_names_measurement_and_station() {
    let stations = vec![st("app", StationKind::MultiServer(4), &[])];
    let e = fit(&stations, &class("c", 10, 0.0), &[point(&[("app", 4.5)])]).unwrap_err();
    assert_eq!(
        e,
        ModelError::UtilizationAboveCores {
            label: "run 1".into(),
            station: "app".into(),
            value: 4.5,
            cores: 4.0
        }
    );
    assert!(msg(e).contains("above its 4 cores"));
    // A measured core count is honoured.
    let mut p = point(&[("app", 4.5)]);
    p.cores.insert("app".into(), 8.0);
    assert!(fit(&stations, &class("c", 10, 0.0), &[p]).is_ok());
}

#[test]
fn measurement_field_errors() {
    let stations = vec![st("app", StationKind::Queue, &[])];
    let c = class("c", 10, 0.0);
    let e = fit(&stations, &c, &[point(&[("nosuch", 0.5)])]).unwrap_err();
    assert!(msg(e).contains("utilization.nosuch"));
    let mut p = point(&[("app", 0.5)]);
    p.throughput = 0.0;
    assert!(msg(fit(&stations, &c, &[p]).unwrap_err()).contains("throughput"));
    let e = fit(&stations, &c, &[point(&[])]).unwrap_err();
    assert_eq!(
        e,
        ModelError::Unfittable {
            station: "app".into()
        }
    );
    assert!(fit(&stations, &c, &[]).is_err());
}

#[test]
fn jmva_element_that_cannot_be_represented() {
    let xml = r#"<model><parameters><classes number="1"><openclass name="web"/></classes></parameters></model>"#;
    let e = jmva::read(xml).unwrap_err();
    assert!(msg(e).contains("<openclass> lacks the `rate` attribute"));
    let xml = r#"<model><parameters><classes number="1"><chain name="web"/></classes></parameters></model>"#;
    let e = jmva::read(xml).unwrap_err();
    assert!(
        matches!(&e, ModelError::JmvaUnsupported { element, .. } if element == "chain"),
        "{e}"
    );
    let xml = r#"<model><parameters><classes number="1"><closedclass name="c" population="2"/></classes>
      <stations number="1"><fcfsqueue name="x"/></stations></parameters></model>"#;
    let e = jmva::read(xml).unwrap_err();
    assert!(msg(e).contains("<fcfsqueue>"));
    let e = jmva::read("<model><parameters>").unwrap_err();
    assert!(matches!(e, ModelError::Jmva(_)));
}

//! Open and mixed networks against closed-form product-form results.

mod common;

use common::st;
use perfpilot_model::{
    Class, ModelError, ModelFile, Network, SolveOptions, StationKind, jmva, solve,
};

#[test]
fn open_network_is_a_set_of_m_m_1_queues() {
    // U = λD; R = D / (1 − U) at a queue, D at a delay.
    let net = Network::new(
        vec![
            st("cpu", StationKind::Queue, &[0.2]),
            st("disk", StationKind::Queue, &[0.3]),
            st("lan", StationKind::Delay, &[1.0]),
        ],
        vec![Class::open("web", 2.0)],
    )
    .unwrap();
    let sol = solve(&net, &SolveOptions::default()).unwrap();
    let c = &sol.classes[0];
    assert!((c.throughput - 2.0).abs() < 1e-12);
    // 0.2/0.6 + 0.3/0.4 + 1 = 0.333333 + 0.75 + 1
    assert!(
        (c.response_time - (0.2 / 0.6 + 0.75 + 1.0)).abs() < 1e-12,
        "{}",
        c.response_time
    );
    assert!((sol.stations[0].queue - 2.0 * 0.2 / 0.6).abs() < 1e-12);
    assert!((sol.stations[1].utilization.unwrap() - 0.6).abs() < 1e-12);
    assert_eq!(sol.bottleneck, "disk");
    assert!((c.bounds.throughput_upper - 1.0 / 0.3).abs() < 1e-12);
}

/// One PS station shared by N closed customers (demand 1, no think time) and an open class
/// with U_o = λ D_o = 0.5. Product form: P(n_o) ∝ C(n_o + N, N) U_o^n_o, so
/// X_closed = (1 − U_o) / D_c = 0.5 for N = 1 and 2, and E[n_o] = (N + 1) U_o / (1 − U_o),
/// i.e. R_open = E[n_o] / λ = 4 (N = 1) and 6 (N = 2).
#[test]
fn mixed_network_matches_product_form() {
    for (n, r_open) in [(1u32, 4.0), (2, 6.0)] {
        let net = Network::new(
            vec![st("cpu", StationKind::Queue, &[1.0, 1.0])],
            vec![Class::closed("batch", n, 0.0), Class::open("web", 0.5)],
        )
        .unwrap();
        let sol = solve(&net, &SolveOptions::default()).unwrap();
        assert!((sol.classes[0].throughput - 0.5).abs() < 1e-12, "N={n}");
        assert!(
            (sol.classes[1].response_time - r_open).abs() < 1e-12,
            "N={n}: {}",
            sol.classes[1].response_time
        );
        assert!((sol.stations[0].utilization.unwrap() - 1.0).abs() < 1e-12);
        assert!(sol.method.contains("mixed"));
    }
}

#[test]
fn open_load_errors_name_the_station() {
    let net = Network::new(
        vec![st("db", StationKind::Queue, &[0.5])],
        vec![Class::open("web", 2.5)],
    )
    .unwrap();
    let e = solve(&net, &SolveOptions::default()).unwrap_err();
    assert_eq!(
        e,
        ModelError::OpenSaturated {
            station: "db".into(),
            utilization: 1.25
        }
    );
    let net = Network::new(
        vec![st("app", StationKind::MultiServer(4), &[0.5])],
        vec![Class::open("web", 1.0)],
    )
    .unwrap();
    let e = solve(&net, &SolveOptions::default()).unwrap_err();
    assert!(e.to_string().contains("`app`"), "{e}");
    let e = Network::new(
        vec![st("a", StationKind::Queue, &[0.5])],
        vec![Class::open("web", -1.0)],
    )
    .unwrap_err();
    assert!(matches!(e, ModelError::BadArrivalRate { .. }));
    let mut c = Class::open("web", 1.0);
    c.population = 3;
    let e = Network::new(vec![st("a", StationKind::Queue, &[0.5])], vec![c]).unwrap_err();
    assert_eq!(
        e,
        ModelError::OpenAndClosed {
            class: "web".into()
        }
    );
}

#[test]
fn open_classes_in_files_and_jmva() {
    let f = ModelFile::parse_toml(
        "[[classes]]\nname = \"batch\"\npopulation = 2\n[[classes]]\nname = \"web\"\narrival_rate = 0.5\n\
         [[stations]]\nname = \"cpu\"\ndemand = { batch = 1.0, web = 1.0 }\n",
    )
    .unwrap();
    let net = f.network().unwrap();
    assert!(net.classes[1].is_open());
    let back = jmva::read(&jmva::write(&net).unwrap()).unwrap();
    assert_eq!(back, net);
    let sol = solve(&back, &SolveOptions::default()).unwrap();
    assert!((sol.classes[1].response_time - 6.0).abs() < 1e-12);
}

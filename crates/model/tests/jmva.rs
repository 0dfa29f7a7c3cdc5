//! JMT JMVA XML: reading a JMVA document and the write → read round trip.

mod common;

use common::{class, st};
use perfpilot_model::{Network, SolveOptions, StationKind, jmva, solve};

/// Shaped like the documents JMT's JMVA writes (classes, stations with service times and
/// visits, reference station, algorithm parameters).
const DOC: &str = r#"<?xml version="1.0" encoding="UTF-8" standalone="no"?>
<model xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:noNamespaceSchemaLocation="JMTmodel.xsd">
  <description><![CDATA[timesharing]]></description>
  <parameters>
    <classes number="1">
      <closedclass name="Class1" population="3"/>
    </classes>
    <stations number="4">
      <delaystation name="Terminals">
        <servicetimes><servicetime customerclass="Class1">4.68</servicetime></servicetimes>
        <visits><visit customerclass="Class1">1.0</visit></visits>
      </delaystation>
      <listation name="CPU" servers="1">
        <servicetimes><servicetime customerclass="Class1">0.039</servicetime></servicetimes>
        <visits><visit customerclass="Class1">20.0</visit></visits>
      </listation>
      <listation name="DiskA">
        <servicetimes><servicetime customerclass="Class1">0.26</servicetime></servicetimes>
        <visits><visit customerclass="Class1">9.0</visit></visits>
      </listation>
      <ldstation name="DiskB">
        <servicetimes><servicetimes customerclass="Class1">1.56;1.56;1.56</servicetimes></servicetimes>
        <visits><visit customerclass="Class1">1.0</visit></visits>
      </ldstation>
    </stations>
    <ReferenceStation number="1"><Class name="Class1" refStation="Terminals"/></ReferenceStation>
  </parameters>
  <algParams><algType maxSamples="10000" name="MVA" tolerance="1.0E-7"/><compareAlgs value="false"/></algParams>
</model>"#;

#[test]
fn reads_a_jmva_document() {
    let net = jmva::read(DOC).unwrap();
    assert_eq!(net.classes[0].population, 3);
    assert!(
        (net.classes[0].think_time - 4.68).abs() < 1e-12,
        "reference delay = think time"
    );
    assert_eq!(net.stations.len(), 3);
    assert!((net.stations[0].demand[0] - 0.78).abs() < 1e-12);
    assert!((net.stations[1].demand[0] - 2.34).abs() < 1e-12);
    assert_eq!(
        net.stations[2].kind,
        StationKind::Queue,
        "constant ld times = queue"
    );
    // The same answer as Jain's Example 35.5.
    let sol = solve(&net, &SolveOptions::default()).unwrap();
    assert!((sol.classes[0].throughput - 0.264).abs() < 1e-3);
}

#[test]
fn round_trip_keeps_the_network() {
    let net = Network::new(
        vec![
            st("web", StationKind::Queue, &[0.01, 0.02]),
            st("app & co", StationKind::MultiServer(4), &[0.05, 0.03]),
            st(
                "db",
                StationKind::LoadDependent(vec![1.0, 1.6, 2.0]),
                &[0.02, 0.0],
            ),
            st("wan", StationKind::Delay, &[0.1, 0.1]),
        ],
        vec![class("browse", 5, 1.0), class("buy", 3, 2.5)],
    )
    .unwrap();
    let xml = jmva::write(&net).unwrap();
    assert!(xml.contains("<ldstation name=\"app &amp; co\">"));
    assert!(xml.contains("<closedclass name=\"buy\" population=\"3\"/>"));
    let back = jmva::read(&xml).unwrap();
    assert_eq!(back.classes, net.classes);
    assert_eq!(back.stations.len(), net.stations.len());
    for (a, b) in back.stations.iter().zip(&net.stations) {
        assert_eq!(a.name, b.name);
        assert_eq!(a.kind, b.kind, "{}", a.name);
        for (x, y) in a.demand.iter().zip(&b.demand) {
            assert!((x - y).abs() < 1e-12);
        }
    }
    let s1 = solve(&net, &SolveOptions::default()).unwrap();
    let s2 = solve(&back, &SolveOptions::default()).unwrap();
    for (a, b) in s1.classes.iter().zip(&s2.classes) {
        assert!((a.throughput - b.throughput).abs() < 1e-12);
    }
}

#[test]
fn single_class_round_trip_without_think_time() {
    let net = Network::new(
        vec![
            st("cpu", StationKind::Queue, &[0.2]),
            st("disk", StationKind::MultiServer(2), &[0.3]),
        ],
        vec![class("c", 4, 0.0)],
    )
    .unwrap();
    let back = jmva::read(&jmva::write(&net).unwrap()).unwrap();
    assert_eq!(back, net);
}

//! JMT's JMVA XML format (the input of the Java Modelling Tools' MVA solver), read and written
//! so that models can be cross-checked with other solvers.
//!
//! Supported: `<closedclass name population>`, `<openclass name rate>`, `<delaystation>`, `<listation servers>`,
//! `<ldstation>` (per-population service times `s1;s2;…`), `<servicetimes>`/`<visits>`,
//! `<ReferenceStation>`, `<algParams>`, `<description>` and `<solutions>` (ignored on read).
//! A delay station that is the reference station of every class is read as the classes'
//! think time (JMVA reports response times without the reference station), and think time is
//! written that way. `<openclass name rate>` is an open class. Anything else is rejected with
//! the element's name.

use crate::error::ModelError;
use crate::network::{Class, Discipline, Network, Station, StationKind};

fn unsupported(element: &str, reason: &str) -> ModelError {
    ModelError::JmvaUnsupported {
        element: element.to_string(),
        reason: reason.to_string(),
    }
}

fn attr<'a>(n: roxmltree::Node<'a, '_>, name: &str) -> Result<&'a str, ModelError> {
    n.attribute(name).ok_or_else(|| {
        ModelError::Jmva(format!(
            "<{}> lacks the `{name}` attribute",
            n.tag_name().name()
        ))
    })
}

fn number(text: &str, what: &str) -> Result<f64, ModelError> {
    let v: f64 = text
        .trim()
        .parse()
        .map_err(|_| ModelError::Jmva(format!("{what}: `{}` is not a number", text.trim())))?;
    if !v.is_finite() || v < 0.0 {
        return Err(ModelError::Jmva(format!(
            "{what}: {v} must be finite and >= 0"
        )));
    }
    Ok(v)
}

fn elements<'a, 'i>(n: roxmltree::Node<'a, 'i>) -> impl Iterator<Item = roxmltree::Node<'a, 'i>> {
    n.children().filter(|c| c.is_element())
}

struct RawStation {
    name: String,
    tag: String,
    servers: u32,
    /// Per class: service times (one, or one per population for ld stations).
    service: Vec<Vec<f64>>,
    visits: Vec<f64>,
}

/// Reads a JMVA document into a network.
pub fn read(xml: &str) -> Result<Network, ModelError> {
    let doc = roxmltree::Document::parse(xml).map_err(|e| ModelError::Jmva(e.to_string()))?;
    let root = doc.root_element();
    if root.tag_name().name() != "model" {
        return Err(ModelError::Jmva(format!(
            "the root element is <{}>, expected <model>",
            root.tag_name().name()
        )));
    }
    let mut classes: Vec<Class> = Vec::new();
    let mut raw: Vec<RawStation> = Vec::new();
    let mut refs: Vec<(String, String)> = Vec::new();
    let mut saw_parameters = false;
    for top in elements(root) {
        match top.tag_name().name() {
            "description" | "algParams" | "solutions" | "whatIf" => {}
            "parameters" => {
                saw_parameters = true;
                for p in elements(top) {
                    match p.tag_name().name() {
                        "classes" => {
                            for c in elements(p) {
                                match c.tag_name().name() {
                                    "closedclass" => {
                                        let name = attr(c, "name")?.to_string();
                                        let pop = number(
                                            attr(c, "population")?,
                                            &format!("class `{name}` population"),
                                        )?;
                                        if pop.fract() != 0.0 || pop > f64::from(u32::MAX) {
                                            return Err(ModelError::Jmva(format!(
                                                "class `{name}`: population {pop} is not a whole number"
                                            )));
                                        }
                                        classes.push(Class::closed(&name, pop as u32, 0.0));
                                    }
                                    "openclass" => {
                                        let name = attr(c, "name")?.to_string();
                                        let rate = number(
                                            attr(c, "rate")?,
                                            &format!("class `{name}` rate"),
                                        )?;
                                        classes.push(Class::open(&name, rate));
                                    }
                                    other => {
                                        return Err(unsupported(other, "unknown class element"));
                                    }
                                }
                            }
                        }
                        "stations" => {
                            for s in elements(p) {
                                raw.push(read_station(s, &classes)?);
                            }
                        }
                        "ReferenceStation" => {
                            for c in elements(p) {
                                if c.tag_name().name() != "Class" {
                                    return Err(unsupported(
                                        c.tag_name().name(),
                                        "expected <Class> inside <ReferenceStation>",
                                    ));
                                }
                                refs.push((
                                    attr(c, "name")?.to_string(),
                                    attr(c, "refStation")?.to_string(),
                                ));
                            }
                        }
                        other => {
                            return Err(unsupported(other, "unknown element inside <parameters>"));
                        }
                    }
                }
            }
            other => return Err(unsupported(other, "unknown element inside <model>")),
        }
    }
    if !saw_parameters {
        return Err(ModelError::Jmva("no <parameters> element".into()));
    }
    // A delay station that every class uses as reference station becomes think time.
    let think_station = raw.iter().position(|r| {
        r.tag == "delaystation"
            && !classes.is_empty()
            && !classes.iter().any(Class::is_open)
            && classes
                .iter()
                .all(|c| refs.iter().any(|(cn, st)| cn == &c.name && st == &r.name))
    });
    if let Some(i) = think_station {
        let r = raw.remove(i);
        for (c, class) in classes.iter_mut().enumerate() {
            class.think_time = r.service[c][0] * r.visits[c];
        }
    }
    let mut stations = Vec::with_capacity(raw.len());
    for r in raw {
        let demand: Vec<f64> = r
            .service
            .iter()
            .zip(&r.visits)
            .map(|(s, v)| s.first().copied().unwrap_or(0.0) * v)
            .collect();
        let kind = match r.tag.as_str() {
            "delaystation" => StationKind::Delay,
            "listation" if r.servers <= 1 => StationKind::Queue,
            "listation" => StationKind::MultiServer(r.servers),
            _ => ld_kind(&r)?,
        };
        stations.push(Station {
            name: r.name,
            kind,
            discipline: Discipline::Ps,
            demand,
        });
    }
    Network::new(stations, classes)
}

fn read_station(s: roxmltree::Node, classes: &[Class]) -> Result<RawStation, ModelError> {
    let tag = s.tag_name().name().to_string();
    if !matches!(tag.as_str(), "delaystation" | "listation" | "ldstation") {
        return Err(unsupported(
            &tag,
            "only delaystation, listation and ldstation are supported",
        ));
    }
    let name = attr(s, "name")?.to_string();
    let servers = match s.attribute("servers") {
        None => 1,
        Some(v) => v.trim().parse::<u32>().map_err(|_| {
            ModelError::Jmva(format!(
                "station `{name}`: servers `{v}` is not a whole number"
            ))
        })?,
    };
    if servers == 0 {
        return Err(ModelError::ZeroServers { station: name });
    }
    let nc = classes.len();
    let mut service = vec![Vec::new(); nc];
    let mut visits = vec![0.0; nc];
    let class_index = |n: roxmltree::Node| -> Result<usize, ModelError> {
        let cn = attr(n, "customerclass")?;
        classes.iter().position(|c| c.name == cn).ok_or_else(|| {
            ModelError::Jmva(format!("station `{name}`: unknown customerclass `{cn}`"))
        })
    };
    for part in elements(s) {
        match part.tag_name().name() {
            "servicetimes" => {
                for st in elements(part) {
                    let c = class_index(st)?;
                    let text = st.text().unwrap_or("");
                    let what = format!("station `{name}` service time of `{}`", classes[c].name);
                    service[c] = match st.tag_name().name() {
                        "servicetime" => vec![number(text, &what)?],
                        "servicetimes" if tag == "ldstation" => text
                            .split(';')
                            .filter(|t| !t.trim().is_empty())
                            .map(|t| number(t, &what))
                            .collect::<Result<_, _>>()?,
                        other => {
                            return Err(unsupported(
                                other,
                                &format!("unexpected inside <servicetimes> of `{name}`"),
                            ));
                        }
                    };
                }
            }
            "visits" => {
                for v in elements(part) {
                    if v.tag_name().name() != "visit" {
                        return Err(unsupported(v.tag_name().name(), "expected <visit>"));
                    }
                    let c = class_index(v)?;
                    visits[c] = number(
                        v.text().unwrap_or(""),
                        &format!("station `{name}` visits of `{}`", classes[c].name),
                    )?;
                }
            }
            other => {
                return Err(unsupported(
                    other,
                    &format!("unknown element inside station `{name}`"),
                ));
            }
        }
    }
    for (c, sv) in service.iter().enumerate() {
        if sv.is_empty() {
            return Err(ModelError::Jmva(format!(
                "station `{name}`: no service time for class `{}`",
                classes[c].name
            )));
        }
    }
    Ok(RawStation {
        name,
        tag,
        servers,
        service,
        visits,
    })
}

/// Rates α(j) = s(1)/s(j) of a JMVA ldstation; every visiting class must share them.
fn ld_kind(r: &RawStation) -> Result<StationKind, ModelError> {
    let mut rates: Option<Vec<f64>> = None;
    for (c, s) in r.service.iter().enumerate() {
        if r.visits[c] == 0.0 || s[0] == 0.0 {
            continue;
        }
        if let Some(j) = s.iter().position(|&v| v == 0.0) {
            return Err(unsupported(
                "servicetimes",
                &format!(
                    "station `{}`: service time 0 at population {}",
                    r.name,
                    j + 1
                ),
            ));
        }
        let mine: Vec<f64> = s.iter().map(|v| s[0] / v).collect();
        match &rates {
            None => rates = Some(mine),
            Some(prev) => {
                let same = prev.len() == mine.len()
                    && prev
                        .iter()
                        .zip(&mine)
                        .all(|(a, b)| (a - b).abs() <= 1e-9 * a.max(*b));
                if !same {
                    return Err(unsupported(
                        "ldstation",
                        &format!(
                            "station `{}`: classes have different load-dependence; perfpilot's load-dependent stations share one rate curve",
                            r.name
                        ),
                    ));
                }
            }
        }
    }
    let mut rates = rates.unwrap_or_else(|| vec![1.0]);
    // The last rate holds for every larger population: drop repeats at the end.
    while rates.len() > 1
        && (rates[rates.len() - 1] - rates[rates.len() - 2]).abs() <= 1e-12 * rates[rates.len() - 1]
    {
        rates.pop();
    }
    // [1, 2, .., m, m, m…] is an m-server station.
    if let Some(m) = multiserver_count(&rates) {
        return Ok(if m == 1 {
            StationKind::Queue
        } else {
            StationKind::MultiServer(m)
        });
    }
    Ok(StationKind::LoadDependent(rates))
}

fn multiserver_count(rates: &[f64]) -> Option<u32> {
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.max(1.0);
    let last = *rates.last()?;
    if last.fract().abs() > 1e-9 && !close(last, last.round()) {
        return None;
    }
    let m = last.round();
    if m < 1.0 {
        return None;
    }
    rates
        .iter()
        .enumerate()
        .all(|(j, &a)| close(a, ((j + 1) as f64).min(m)))
        .then_some(m as u32)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// Writes a network as a JMVA document (demands as service times with visit ratio 1; think
/// time as a reference delay station; multi-server and load-dependent stations as ldstation).
pub fn write(net: &Network) -> Result<String, ModelError> {
    net.check()?;
    let ntot = net.total_population().max(1);
    let mut o = String::new();
    o.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n");
    o.push_str("<model xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xsi:noNamespaceSchemaLocation=\"JMTmodel.xsd\">\n");
    o.push_str("  <description><![CDATA[written by perfpilot model]]></description>\n");
    o.push_str("  <parameters>\n");
    write_classes(&mut o, net);
    let think = net.classes.iter().any(|c| c.think_time > 0.0);
    let mut think_name = "Think".to_string();
    while net.stations.iter().any(|s| s.name == think_name) {
        think_name.push('_');
    }
    let count = net.stations.len() + usize::from(think);
    o.push_str(&format!("    <stations number=\"{count}\">\n"));
    if think {
        write_think(&mut o, net, &think_name);
    }
    for s in &net.stations {
        let visits: Vec<f64> = s
            .demand
            .iter()
            .map(|&d| if d > 0.0 { 1.0 } else { 0.0 })
            .collect();
        let (open, close, values) = station_xml(net, s, ntot);
        o.push_str(&open);
        write_per_class(&mut o, net, &values, &visits);
        o.push_str(close);
    }
    o.push_str("    </stations>\n");
    let reference = if think {
        think_name.clone()
    } else {
        net.stations[0].name.clone()
    };
    write_reference(&mut o, net, &reference);
    o.push_str("  <algParams>\n    <algType maxSamples=\"10000\" name=\"MVA\" tolerance=\"1.0E-7\"/>\n    <compareAlgs value=\"false\"/>\n  </algParams>\n");
    o.push_str("</model>\n");
    Ok(o)
}

/// The `<classes>` element: open classes with their rate, closed ones with their population.
fn write_classes(o: &mut String, net: &Network) {
    o.push_str(&format!("    <classes number=\"{}\">\n", net.classes.len()));
    for c in &net.classes {
        match c.arrival_rate {
            Some(rate) => o.push_str(&format!(
                "      <openclass name=\"{}\" rate=\"{rate:?}\"/>\n",
                esc(&c.name)
            )),
            None => o.push_str(&format!(
                "      <closedclass name=\"{}\" population=\"{}\"/>\n",
                esc(&c.name),
                c.population
            )),
        }
    }
    o.push_str("    </classes>\n");
}

/// A station's service times (`values`, one element per class) and visits.
fn write_per_class(o: &mut String, net: &Network, values: &[String], visits: &[f64]) {
    o.push_str("        <servicetimes>\n");
    for v in values {
        o.push_str(v);
    }
    o.push_str("        </servicetimes>\n        <visits>\n");
    for (c, class) in net.classes.iter().enumerate() {
        o.push_str(&format!(
            "          <visit customerclass=\"{}\">{:?}</visit>\n",
            esc(&class.name),
            visits[c]
        ));
    }
    o.push_str("        </visits>\n");
}

/// The classes' think times as a delay station named `think_name`.
fn write_think(o: &mut String, net: &Network, think_name: &str) {
    o.push_str(&format!(
        "      <delaystation name=\"{}\">\n",
        esc(think_name)
    ));
    let values: Vec<String> = net
        .classes
        .iter()
        .map(|c| {
            format!(
                "          <servicetime customerclass=\"{}\">{:?}</servicetime>\n",
                esc(&c.name),
                c.think_time
            )
        })
        .collect();
    write_per_class(o, net, &values, &vec![1.0; net.classes.len()]);
    o.push_str("      </delaystation>\n");
}

/// A station's opening and closing tags and its service times per class: a delay, a
/// load-independent queue, or a load-dependent station with a service time per population
/// up to `ntot` (or its rate table's length).
fn station_xml(net: &Network, s: &Station, ntot: u32) -> (String, &'static str, Vec<String>) {
    match &s.kind {
        StationKind::Delay | StationKind::Queue => {
            let tag = if s.kind == StationKind::Delay {
                "delaystation"
            } else {
                "listation"
            };
            let open = if tag == "listation" {
                format!(
                    "      <listation name=\"{}\" servers=\"1\">\n",
                    esc(&s.name)
                )
            } else {
                format!("      <delaystation name=\"{}\">\n", esc(&s.name))
            };
            let values = net
                .classes
                .iter()
                .zip(&s.demand)
                .map(|(c, d)| {
                    format!(
                        "          <servicetime customerclass=\"{}\">{d:?}</servicetime>\n",
                        esc(&c.name)
                    )
                })
                .collect();
            (
                open,
                if tag == "listation" {
                    "      </listation>\n"
                } else {
                    "      </delaystation>\n"
                },
                values,
            )
        }
        StationKind::MultiServer(_) | StationKind::LoadDependent(_) => {
            let len = match &s.kind {
                StationKind::LoadDependent(r) => r.len().max(ntot as usize),
                _ => ntot as usize,
            };
            let values = net
                .classes
                .iter()
                .zip(&s.demand)
                .map(|(c, d)| {
                    let times: Vec<String> = (1..=len)
                        .map(|j| format!("{:?}", d / s.kind.rate(j as u32)))
                        .collect();
                    format!(
                        "          <servicetimes customerclass=\"{}\">{}</servicetimes>\n",
                        esc(&c.name),
                        times.join(";")
                    )
                })
                .collect();
            (
                format!("      <ldstation name=\"{}\">\n", esc(&s.name)),
                "      </ldstation>\n",
                values,
            )
        }
    }
}

/// The reference station of every class.
fn write_reference(o: &mut String, net: &Network, reference: &str) {
    o.push_str(&format!(
        "    <ReferenceStation number=\"{}\">\n",
        net.classes.len()
    ));
    for c in &net.classes {
        o.push_str(&format!(
            "      <Class name=\"{}\" refStation=\"{}\"/>\n",
            esc(&c.name),
            esc(reference)
        ));
    }
    o.push_str("    </ReferenceStation>\n  </parameters>\n");
}

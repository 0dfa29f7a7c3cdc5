//! A PMML subset: `RegressionModel` (linear and logistic regression), `TreeModel`, and
//! `MiningModel` ensembles whose segmentation combines by `sum`, `average`, `weightedAverage`,
//! `majorityVote`, `weightedMajorityVote` or `selectFirst`. Derived fields that are plain
//! `FieldRef` aliases or `Constant`s are supported (exporters such as JPMML-SkLearn write them).
//! Anything else is rejected with the file, the element and its line.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use roxmltree::{Document, Node as XmlNode};

/// A malformed or unsupported PMML file.
#[derive(Debug, thiserror::Error)]
pub enum PmmlError {
    /// The file could not be read.
    #[error("cannot read model file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file is not well-formed XML.
    #[error("model file {path} is not well-formed XML: {reason}")]
    Xml { path: PathBuf, reason: String },
    /// An element is missing, malformed or unsupported.
    #[error("model file {path}: element <{element}> at line {line}: {reason}")]
    Element {
        path: PathBuf,
        element: String,
        line: u32,
        reason: String,
    },
}

/// An input or output value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Num(f64),
    Str(String),
}

impl Value {
    fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Num(v) => Some(*v),
            Value::Str(s) => s.trim().parse().ok(),
        }
    }
    fn as_string(&self) -> String {
        match self {
            Value::Num(v) => format_num(*v),
            Value::Str(s) => s.clone(),
        }
    }
}

fn format_num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// Whether a model predicts a number or a category.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Function {
    Regression,
    Classification,
}

/// A model's result.
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    /// The predicted value (a category label for classification).
    pub value: Value,
    /// Class probabilities (classification only).
    pub probabilities: BTreeMap<String, f64>,
}

/// Why a record could not be scored.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ScoreError {
    #[error("input field {0:?} is missing or not a number")]
    MissingInput(String),
    #[error("the model gives no prediction for this input ({0})")]
    NoPrediction(String),
}

#[derive(Clone, Debug)]
enum Expr {
    FieldRef(String),
    Constant(Value),
}

#[derive(Clone, Debug, PartialEq)]
enum Norm {
    None,
    Softmax,
    Simplemax,
    Logit,
    Probit,
    Cloglog,
    Exp,
}

#[derive(Clone, Debug)]
struct RegressionTable {
    intercept: f64,
    category: Option<String>,
    numeric: Vec<(String, f64, i32)>,
    categorical: Vec<(String, String, f64)>,
}

#[derive(Clone, Debug)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Missing,
    NotMissing,
}

#[derive(Clone, Debug)]
enum Predicate {
    True,
    False,
    Simple {
        field: String,
        op: Op,
        value: String,
    },
    Set {
        field: String,
        is_in: bool,
        values: Vec<String>,
    },
    And(Vec<Predicate>),
    Or(Vec<Predicate>),
    Xor(Vec<Predicate>),
    Surrogate(Vec<Predicate>),
}

#[derive(Clone, Debug)]
struct TreeNode {
    predicate: Predicate,
    score: Option<String>,
    distribution: Vec<(String, f64)>,
    children: Vec<TreeNode>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Combine {
    Sum,
    Average,
    WeightedAverage,
    MajorityVote,
    WeightedMajorityVote,
    SelectFirst,
}

#[derive(Clone, Debug)]
struct Segment {
    predicate: Predicate,
    weight: f64,
    model: Model,
}

#[derive(Clone, Debug)]
enum Kind {
    Regression {
        norm: Norm,
        tables: Vec<RegressionTable>,
    },
    Tree {
        root: TreeNode,
    },
    Mining {
        combine: Combine,
        segments: Vec<Segment>,
    },
}

/// One parsed model.
#[derive(Clone, Debug)]
pub struct Model {
    /// `modelName`, or the element name.
    pub name: String,
    pub function: Function,
    /// The target field, when the mining schema names one.
    pub target: Option<String>,
    /// Input (active) fields of the mining schema.
    pub inputs: Vec<String>,
    derived: Vec<(String, Expr)>,
    kind: Kind,
}

const MODEL_ELEMENTS: [&str; 3] = ["RegressionModel", "TreeModel", "MiningModel"];

struct Ctx<'a> {
    path: &'a Path,
    doc: &'a Document<'a>,
}

impl Ctx<'_> {
    fn err(&self, node: XmlNode, reason: impl Into<String>) -> PmmlError {
        PmmlError::Element {
            path: self.path.to_path_buf(),
            element: node.tag_name().name().to_string(),
            line: self.doc.text_pos_at(node.range().start).row,
            reason: reason.into(),
        }
    }

    fn attr<'n>(&self, node: XmlNode<'n, '_>, name: &str) -> Result<&'n str, PmmlError> {
        node.attribute(name)
            .ok_or_else(|| self.err(node, format!("missing attribute {name:?}")))
    }

    fn num(&self, node: XmlNode, name: &str) -> Result<f64, PmmlError> {
        let v = self.attr(node, name)?;
        v.trim()
            .parse()
            .map_err(|_| self.err(node, format!("attribute {name}={v:?} is not a number")))
    }

    fn num_or(&self, node: XmlNode, name: &str, default: f64) -> Result<f64, PmmlError> {
        if node.attribute(name).is_some() {
            self.num(node, name)
        } else {
            Ok(default)
        }
    }
}

fn elements<'a, 'i>(node: XmlNode<'a, 'i>) -> impl Iterator<Item = XmlNode<'a, 'i>> {
    node.children().filter(|n| n.is_element())
}

fn child<'a, 'i>(node: XmlNode<'a, 'i>, name: &str) -> Option<XmlNode<'a, 'i>> {
    elements(node).find(|n| n.tag_name().name() == name)
}

/// Reads and parses a PMML file.
pub fn load(path: &Path) -> Result<Model, PmmlError> {
    let text = std::fs::read_to_string(path).map_err(|source| PmmlError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text, path)
}

/// Parses PMML text; `path` names the file in errors.
pub fn parse(text: &str, path: &Path) -> Result<Model, PmmlError> {
    let doc = Document::parse(text).map_err(|e| PmmlError::Xml {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let cx = Ctx { path, doc: &doc };
    let root = doc.root_element();
    if root.tag_name().name() != "PMML" {
        return Err(cx.err(root, "the root element must be <PMML>"));
    }
    let mut global = Vec::new();
    if let Some(td) = child(root, "TransformationDictionary") {
        global = derived_fields(&cx, td)?;
    }
    let model_node = elements(root)
        .find(|n| {
            let name = n.tag_name().name();
            MODEL_ELEMENTS.contains(&name)
                || name.ends_with("Model")
                || name == "NeuralNetwork"
                || name == "Scorecard"
        })
        .ok_or_else(|| {
            cx.err(
                root,
                "contains no model element (supported: RegressionModel, TreeModel, MiningModel)",
            )
        })?;
    let mut model = parse_model(&cx, model_node)?;
    global.extend(model.derived);
    model.derived = global;
    Ok(model)
}

fn derived_fields(cx: &Ctx, parent: XmlNode) -> Result<Vec<(String, Expr)>, PmmlError> {
    let mut out = Vec::new();
    for d in elements(parent) {
        match d.tag_name().name() {
            "DerivedField" => {
                let name = cx.attr(d, "name")?.to_string();
                let e = elements(d)
                    .next()
                    .ok_or_else(|| cx.err(d, "has no expression"))?;
                let expr = match e.tag_name().name() {
                    "FieldRef" => Expr::FieldRef(cx.attr(e, "field")?.to_string()),
                    "Constant" => {
                        let t = e.text().unwrap_or("").trim();
                        Expr::Constant(match t.parse::<f64>() {
                            Ok(v) => Value::Num(v),
                            Err(_) => Value::Str(t.to_string()),
                        })
                    }
                    other => {
                        return Err(cx.err(
                            e,
                            format!(
                                "unsupported expression <{other}> (supported: FieldRef, Constant)"
                            ),
                        ));
                    }
                };
                out.push((name, expr));
            }
            "Extension" => {}
            other => return Err(cx.err(d, format!("unsupported element <{other}> here"))),
        }
    }
    Ok(out)
}

fn parse_model(cx: &Ctx, node: XmlNode) -> Result<Model, PmmlError> {
    let tag = node.tag_name().name();
    if !MODEL_ELEMENTS.contains(&tag) {
        return Err(cx.err(
            node,
            "unsupported model type (supported: RegressionModel, TreeModel, MiningModel)",
        ));
    }
    let function = match cx.attr(node, "functionName")? {
        "regression" => Function::Regression,
        "classification" => Function::Classification,
        other => {
            return Err(cx.err(
                node,
                format!("functionName {other:?} is not supported (regression, classification)"),
            ));
        }
    };
    let schema =
        child(node, "MiningSchema").ok_or_else(|| cx.err(node, "has no <MiningSchema>"))?;
    let mut inputs = Vec::new();
    let mut target = None;
    for f in elements(schema).filter(|n| n.tag_name().name() == "MiningField") {
        let name = cx.attr(f, "name")?.to_string();
        match f.attribute("usageType").unwrap_or("active") {
            "target" | "predicted" => target = Some(name),
            "active" => inputs.push(name),
            _ => {}
        }
    }
    let derived = match child(node, "LocalTransformations") {
        Some(lt) => derived_fields(cx, lt)?,
        None => Vec::new(),
    };
    let kind = match tag {
        "RegressionModel" => parse_regression(cx, node, function)?,
        "TreeModel" => {
            let root = child(node, "Node").ok_or_else(|| cx.err(node, "has no root <Node>"))?;
            Kind::Tree {
                root: parse_node(cx, root)?,
            }
        }
        _ => parse_mining(cx, node)?,
    };
    Ok(Model {
        name: node.attribute("modelName").unwrap_or(tag).to_string(),
        function,
        target,
        inputs,
        derived,
        kind,
    })
}

fn parse_regression(cx: &Ctx, node: XmlNode, function: Function) -> Result<Kind, PmmlError> {
    let norm = match node.attribute("normalizationMethod").unwrap_or("none") {
        "none" => Norm::None,
        "softmax" => Norm::Softmax,
        "simplemax" => Norm::Simplemax,
        "logit" => Norm::Logit,
        "probit" => Norm::Probit,
        "cloglog" => Norm::Cloglog,
        "exp" => Norm::Exp,
        other => {
            return Err(cx.err(
                node,
                format!("normalizationMethod {other:?} is not supported"),
            ));
        }
    };
    let mut tables = Vec::new();
    for t in elements(node).filter(|n| n.tag_name().name() == "RegressionTable") {
        let mut table = RegressionTable {
            intercept: cx.num(t, "intercept")?,
            category: t.attribute("targetCategory").map(str::to_string),
            numeric: Vec::new(),
            categorical: Vec::new(),
        };
        for p in elements(t) {
            match p.tag_name().name() {
                "NumericPredictor" => table.numeric.push((
                    cx.attr(p, "name")?.to_string(),
                    cx.num(p, "coefficient")?,
                    cx.num_or(p, "exponent", 1.0)? as i32,
                )),
                "CategoricalPredictor" => table.categorical.push((
                    cx.attr(p, "name")?.to_string(),
                    cx.attr(p, "value")?.to_string(),
                    cx.num(p, "coefficient")?,
                )),
                "Extension" => {}
                other => {
                    return Err(cx.err(p, format!("unsupported predictor <{other}>")));
                }
            }
        }
        if function == Function::Classification && table.category.is_none() {
            return Err(cx.err(t, "a classification table needs targetCategory"));
        }
        tables.push(table);
    }
    if tables.is_empty() {
        return Err(cx.err(node, "has no <RegressionTable>"));
    }
    Ok(Kind::Regression { norm, tables })
}

fn parse_predicate(cx: &Ctx, node: XmlNode) -> Result<Predicate, PmmlError> {
    Ok(match node.tag_name().name() {
        "True" => Predicate::True,
        "False" => Predicate::False,
        "SimplePredicate" => {
            let op = match cx.attr(node, "operator")? {
                "equal" => Op::Eq,
                "notEqual" => Op::Ne,
                "lessThan" => Op::Lt,
                "lessOrEqual" => Op::Le,
                "greaterThan" => Op::Gt,
                "greaterOrEqual" => Op::Ge,
                "isMissing" => Op::Missing,
                "isNotMissing" => Op::NotMissing,
                other => return Err(cx.err(node, format!("unknown operator {other:?}"))),
            };
            let value = match op {
                Op::Missing | Op::NotMissing => String::new(),
                _ => cx.attr(node, "value")?.to_string(),
            };
            Predicate::Simple {
                field: cx.attr(node, "field")?.to_string(),
                op,
                value,
            }
        }
        "SimpleSetPredicate" => {
            let arr = child(node, "Array").ok_or_else(|| cx.err(node, "has no <Array>"))?;
            Predicate::Set {
                field: cx.attr(node, "field")?.to_string(),
                is_in: cx.attr(node, "booleanOperator")? == "isIn",
                values: parse_array(arr.text().unwrap_or("")),
            }
        }
        "CompoundPredicate" => {
            let parts = elements(node)
                .filter(|n| n.tag_name().name() != "Extension")
                .map(|n| parse_predicate(cx, n))
                .collect::<Result<Vec<_>, _>>()?;
            match cx.attr(node, "booleanOperator")? {
                "and" => Predicate::And(parts),
                "or" => Predicate::Or(parts),
                "xor" => Predicate::Xor(parts),
                "surrogate" => Predicate::Surrogate(parts),
                other => return Err(cx.err(node, format!("unknown booleanOperator {other:?}"))),
            }
        }
        other => return Err(cx.err(node, format!("unsupported predicate <{other}>"))),
    })
}

/// Splits a PMML `<Array>`: whitespace-separated, double quotes group values with spaces.
fn parse_array(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in text.chars() {
        match c {
            '"' => {
                if quoted {
                    out.push(std::mem::take(&mut cur));
                }
                quoted = !quoted;
            }
            c if c.is_whitespace() && !quoted => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

const PREDICATES: [&str; 5] = [
    "True",
    "False",
    "SimplePredicate",
    "SimpleSetPredicate",
    "CompoundPredicate",
];

fn parse_node(cx: &Ctx, node: XmlNode) -> Result<TreeNode, PmmlError> {
    let pred = elements(node)
        .find(|n| PREDICATES.contains(&n.tag_name().name()))
        .ok_or_else(|| cx.err(node, "has no predicate (True, SimplePredicate, …)"))?;
    let mut distribution = Vec::new();
    let mut children = Vec::new();
    for c in elements(node) {
        match c.tag_name().name() {
            "ScoreDistribution" => {
                let count = cx.num(c, "recordCount")?;
                let weight = match c.attribute("probability") {
                    Some(_) => cx.num(c, "probability")?,
                    None => count,
                };
                distribution.push((cx.attr(c, "value")?.to_string(), weight));
            }
            "Node" => children.push(parse_node(cx, c)?),
            _ => {}
        }
    }
    Ok(TreeNode {
        predicate: parse_predicate(cx, pred)?,
        score: node.attribute("score").map(str::to_string),
        distribution,
        children,
    })
}

fn parse_mining(cx: &Ctx, node: XmlNode) -> Result<Kind, PmmlError> {
    let seg = child(node, "Segmentation").ok_or_else(|| cx.err(node, "has no <Segmentation>"))?;
    let combine = match cx.attr(seg, "multipleModelMethod")? {
        "sum" => Combine::Sum,
        "average" => Combine::Average,
        "weightedAverage" => Combine::WeightedAverage,
        "majorityVote" => Combine::MajorityVote,
        "weightedMajorityVote" => Combine::WeightedMajorityVote,
        "selectFirst" => Combine::SelectFirst,
        other => {
            return Err(cx.err(
                seg,
                format!(
                    "multipleModelMethod {other:?} is not supported (sum, average, weightedAverage, majorityVote, weightedMajorityVote, selectFirst)"
                ),
            ));
        }
    };
    let mut segments = Vec::new();
    for s in elements(seg).filter(|n| n.tag_name().name() == "Segment") {
        let pred = elements(s)
            .find(|n| PREDICATES.contains(&n.tag_name().name()))
            .ok_or_else(|| cx.err(s, "has no predicate"))?;
        let m = elements(s)
            .find(|n| n.tag_name().name().ends_with("Model"))
            .ok_or_else(|| cx.err(s, "has no model"))?;
        segments.push(Segment {
            predicate: parse_predicate(cx, pred)?,
            weight: cx.num_or(s, "weight", 1.0)?,
            model: parse_model(cx, m)?,
        });
    }
    if segments.is_empty() {
        return Err(cx.err(seg, "has no <Segment>"));
    }
    Ok(Kind::Mining { combine, segments })
}

/// Field values of one record.
pub type Record = HashMap<String, Value>;

fn eval_predicate(p: &Predicate, rec: &Record) -> Option<bool> {
    match p {
        Predicate::True => Some(true),
        Predicate::False => Some(false),
        Predicate::Simple { field, op, value } => {
            let v = rec.get(field);
            match op {
                Op::Missing => return Some(v.is_none()),
                Op::NotMissing => return Some(v.is_some()),
                _ => {}
            }
            let v = v?;
            let ord = match (v.as_f64(), value.trim().parse::<f64>()) {
                (Some(a), Ok(b)) => a.partial_cmp(&b)?,
                _ => v.as_string().as_str().cmp(value.as_str()),
            };
            use std::cmp::Ordering::*;
            Some(match op {
                Op::Eq => ord == Equal,
                Op::Ne => ord != Equal,
                Op::Lt => ord == Less,
                Op::Le => ord != Greater,
                Op::Gt => ord == Greater,
                Op::Ge => ord != Less,
                Op::Missing | Op::NotMissing => false,
            })
        }
        Predicate::Set {
            field,
            is_in,
            values,
        } => {
            let v = rec.get(field)?.as_string();
            Some(values.contains(&v) == *is_in)
        }
        Predicate::And(ps) => {
            let mut unknown = false;
            for p in ps {
                match eval_predicate(p, rec) {
                    Some(false) => return Some(false),
                    None => unknown = true,
                    _ => {}
                }
            }
            if unknown { None } else { Some(true) }
        }
        Predicate::Or(ps) => {
            let mut unknown = false;
            for p in ps {
                match eval_predicate(p, rec) {
                    Some(true) => return Some(true),
                    None => unknown = true,
                    _ => {}
                }
            }
            if unknown { None } else { Some(false) }
        }
        Predicate::Xor(ps) => {
            let mut acc = false;
            for p in ps {
                acc ^= eval_predicate(p, rec)?;
            }
            Some(acc)
        }
        Predicate::Surrogate(ps) => ps.iter().find_map(|p| eval_predicate(p, rec)),
    }
}

fn norm_link(norm: &Norm, y: f64) -> f64 {
    match norm {
        Norm::Logit => 1.0 / (1.0 + (-y).exp()),
        Norm::Exp => y.exp(),
        Norm::Cloglog => 1.0 - (-(y.exp())).exp(),
        Norm::Probit => 0.5 * (1.0 + erf(y / std::f64::consts::SQRT_2)),
        _ => y,
    }
}

/// Abramowitz–Stegun 7.1.26 (|error| < 1.5e-7), enough for probit links.
fn erf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let y = 1.0
        - (((((1.061_405_429 * t - 1.453_152_027) * t) + 1.421_413_741) * t - 0.284_496_736) * t
            + 0.254_829_592)
            * t
            * (-x * x).exp();
    if x >= 0.0 { y } else { -y }
}

impl Model {
    /// Scores one record of input values.
    pub fn score(&self, inputs: &Record) -> Result<Prediction, ScoreError> {
        let mut rec = inputs.clone();
        for (name, expr) in &self.derived {
            let v = match expr {
                Expr::FieldRef(f) => rec.get(f).cloned(),
                Expr::Constant(v) => Some(v.clone()),
            };
            if let Some(v) = v {
                rec.insert(name.clone(), v);
            }
        }
        match &self.kind {
            Kind::Regression { norm, tables } => self.score_regression(norm, tables, &rec),
            Kind::Tree { root } => self.score_tree(root, &rec),
            Kind::Mining { combine, segments } => self.score_mining(*combine, segments, &rec),
        }
    }

    fn score_regression(
        &self,
        norm: &Norm,
        tables: &[RegressionTable],
        rec: &Record,
    ) -> Result<Prediction, ScoreError> {
        let mut ys = Vec::with_capacity(tables.len());
        for t in tables {
            let mut y = t.intercept;
            for (f, c, e) in &t.numeric {
                let x = rec
                    .get(f)
                    .and_then(Value::as_f64)
                    .ok_or_else(|| ScoreError::MissingInput(f.clone()))?;
                y += c * x.powi(*e);
            }
            for (f, v, c) in &t.categorical {
                let x = rec
                    .get(f)
                    .ok_or_else(|| ScoreError::MissingInput(f.clone()))?;
                if x.as_string() == *v {
                    y += c;
                }
            }
            ys.push(y);
        }
        if self.function == Function::Regression {
            let y = ys.first().copied().unwrap_or(0.0);
            let y = match norm {
                Norm::Softmax => norm_link(&Norm::Logit, y),
                n => norm_link(n, y),
            };
            return Ok(Prediction {
                value: Value::Num(y),
                probabilities: BTreeMap::new(),
            });
        }
        let k = ys.len();
        let probs: Vec<f64> = match norm {
            Norm::Softmax => {
                let m = ys.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = ys.iter().map(|y| (y - m).exp()).collect();
                let s: f64 = e.iter().sum();
                e.iter().map(|v| v / s).collect()
            }
            Norm::Simplemax => {
                let s: f64 = ys.iter().sum();
                ys.iter().map(|y| y / s).collect()
            }
            Norm::None => {
                // Raw values for the first k-1 categories; the last takes the rest.
                let mut p: Vec<f64> = ys[..k - 1].to_vec();
                p.push(1.0 - p.iter().sum::<f64>());
                p
            }
            n => {
                let mut p: Vec<f64> = ys[..k - 1].iter().map(|y| norm_link(n, *y)).collect();
                p.push(1.0 - p.iter().sum::<f64>());
                p
            }
        };
        let mut probabilities = BTreeMap::new();
        let mut best: Option<(usize, f64)> = None;
        for (i, (t, p)) in tables.iter().zip(&probs).enumerate() {
            probabilities.insert(t.category.clone().unwrap_or_default(), *p);
            if best.is_none_or(|(_, b)| *p > b) {
                best = Some((i, *p));
            }
        }
        let (i, _) = best.ok_or_else(|| ScoreError::NoPrediction("no tables".to_string()))?;
        Ok(Prediction {
            value: Value::Str(tables[i].category.clone().unwrap_or_default()),
            probabilities,
        })
    }

    fn score_tree(&self, root: &TreeNode, rec: &Record) -> Result<Prediction, ScoreError> {
        if eval_predicate(&root.predicate, rec) != Some(true) {
            return Err(ScoreError::NoPrediction(
                "the root predicate is false".to_string(),
            ));
        }
        let mut node = root;
        while let Some(c) = node
            .children
            .iter()
            .find(|c| eval_predicate(&c.predicate, rec) == Some(true))
        {
            node = c;
        }
        let score = node.score.clone().ok_or_else(|| {
            ScoreError::NoPrediction("no leaf matches (an input may be missing)".to_string())
        })?;
        let total: f64 = node.distribution.iter().map(|(_, w)| w).sum();
        let probabilities = if self.function == Function::Classification && total > 0.0 {
            node.distribution
                .iter()
                .map(|(k, w)| (k.clone(), w / total))
                .collect()
        } else {
            BTreeMap::new()
        };
        let value = match self.function {
            Function::Regression => Value::Num(score.trim().parse().map_err(|_| {
                ScoreError::NoPrediction(format!("score {score:?} is not a number"))
            })?),
            Function::Classification => Value::Str(score),
        };
        Ok(Prediction {
            value,
            probabilities,
        })
    }

    fn score_mining(
        &self,
        combine: Combine,
        segments: &[Segment],
        rec: &Record,
    ) -> Result<Prediction, ScoreError> {
        let mut results = Vec::new();
        for s in segments {
            if eval_predicate(&s.predicate, rec) == Some(true) {
                let p = s.model.score(rec)?;
                if combine == Combine::SelectFirst {
                    return Ok(p);
                }
                results.push((s.weight, p));
            }
        }
        if results.is_empty() {
            return Err(ScoreError::NoPrediction("no segment applies".to_string()));
        }
        let total_w: f64 = results.iter().map(|(w, _)| w).sum();
        let n = results.len() as f64;
        match self.function {
            Function::Regression => {
                let mut sum = 0.0;
                for (w, p) in &results {
                    let v = match &p.value {
                        Value::Num(v) => *v,
                        other => other.as_f64().ok_or_else(|| {
                            ScoreError::NoPrediction("a segment gave a category".to_string())
                        })?,
                    };
                    sum += match combine {
                        Combine::WeightedAverage => w * v,
                        _ => v,
                    };
                }
                let value = match combine {
                    Combine::Sum => sum,
                    Combine::WeightedAverage => sum / total_w,
                    _ => sum / n,
                };
                Ok(Prediction {
                    value: Value::Num(value),
                    probabilities: BTreeMap::new(),
                })
            }
            Function::Classification => {
                let mut acc: BTreeMap<String, f64> = BTreeMap::new();
                for (w, p) in &results {
                    match combine {
                        Combine::MajorityVote | Combine::WeightedMajorityVote => {
                            let wt = if combine == Combine::WeightedMajorityVote {
                                *w
                            } else {
                                1.0
                            };
                            *acc.entry(p.value.as_string()).or_default() += wt;
                        }
                        Combine::WeightedAverage => {
                            for (k, v) in &p.probabilities {
                                *acc.entry(k.clone()).or_default() += w * v;
                            }
                        }
                        _ => {
                            for (k, v) in &p.probabilities {
                                *acc.entry(k.clone()).or_default() += v;
                            }
                        }
                    }
                }
                let denom = match combine {
                    Combine::WeightedMajorityVote | Combine::WeightedAverage => total_w,
                    _ => n,
                };
                let probabilities: BTreeMap<String, f64> =
                    acc.into_iter().map(|(k, v)| (k, v / denom)).collect();
                let best = probabilities
                    .iter()
                    .fold(None::<(&String, f64)>, |b, (k, v)| match b {
                        Some((_, bv)) if bv >= *v => b,
                        _ => Some((k, *v)),
                    })
                    .map(|(k, _)| k.clone())
                    .ok_or_else(|| {
                        ScoreError::NoPrediction("segments gave no classes".to_string())
                    })?;
                Ok(Prediction {
                    value: Value::Str(best),
                    probabilities,
                })
            }
        }
    }
}

//! Reading a PMML document into a [`Model`]: the mining schema, derived fields, regression
//! tables, tree nodes and segmentations, each checked, with errors naming the element and line.

use std::path::Path;

use roxmltree::{Document, Node as XmlNode};

use super::{
    Combine, Expr, Function, Kind, Model, Norm, Op, PmmlError, Predicate, RegressionTable, Segment,
    TreeNode, Value,
};

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

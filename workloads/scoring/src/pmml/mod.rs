//! A PMML subset: `RegressionModel` (linear and logistic regression), `TreeModel`, and
//! `MiningModel` ensembles whose segmentation combines by `sum`, `average`, `weightedAverage`,
//! `majorityVote`, `weightedMajorityVote` or `selectFirst`. Derived fields that are plain
//! `FieldRef` aliases or `Constant`s are supported (exporters such as JPMML-SkLearn write them).
//! Anything else is rejected with the file, the element and its line.

//! - `parse`: the PMML document read into a [`Model`];
//! - `score`: a [`Model`] applied to a [`Record`].

mod parse;
mod score;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

pub use parse::{load, parse};

/// A malformed or unsupported PMML file.
#[derive(Debug, thiserror::Error)]
pub enum PmmlError {
    /// The file could not be read.
    #[error("cannot read model file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// The file is not well-formed XML.
    #[error("model file {path} is not well-formed XML: {reason}")]
    Xml {
        /// The file.
        path: PathBuf,
        /// The XML parser's message.
        reason: String,
    },
    /// An element is missing, malformed or unsupported.
    #[error("model file {path}: element <{element}> at line {line}: {reason}")]
    Element {
        /// The file.
        path: PathBuf,
        /// The element's name.
        element: String,
        /// Its line in the file, from 1.
        line: u32,
        /// What is wrong, or what is supported instead.
        reason: String,
    },
}

/// An input or output value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A number.
    Num(f64),
    /// A string (a category, or a number written as text).
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
    /// Predicts a number.
    Regression,
    /// Predicts a category, with class probabilities.
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
    /// A field the model needs is absent (or not a number where one is needed).
    #[error("input field {0:?} is missing or not a number")]
    MissingInput(String),
    /// No tree leaf, segment or table applies to the record.
    #[error("the model gives no prediction for this input ({0})")]
    NoPrediction(String),
}

/// A derived field's expression.
#[derive(Clone, Debug)]
enum Expr {
    FieldRef(String),
    Constant(Value),
}

/// `normalizationMethod` of a regression model: how table values become the prediction.
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

/// One `<RegressionTable>`: one per category of a classification.
#[derive(Clone, Debug)]
struct RegressionTable {
    intercept: f64,
    /// `targetCategory` (classification only).
    category: Option<String>,
    /// (field, coefficient, exponent).
    numeric: Vec<(String, f64, i32)>,
    /// (field, value, coefficient): the coefficient counts when the field has the value.
    categorical: Vec<(String, String, f64)>,
}

/// A `SimplePredicate`'s operator.
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

/// A predicate of a tree node or segment; `None` from evaluating one means unknown (a missing
/// input).
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

/// A `<Node>` of a tree.
#[derive(Clone, Debug)]
struct TreeNode {
    predicate: Predicate,
    score: Option<String>,
    /// (category, record count or probability) for class probabilities.
    distribution: Vec<(String, f64)>,
    children: Vec<TreeNode>,
}

/// `multipleModelMethod` of a segmentation.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Combine {
    Sum,
    Average,
    WeightedAverage,
    MajorityVote,
    WeightedMajorityVote,
    SelectFirst,
}

/// One `<Segment>` of an ensemble.
#[derive(Clone, Debug)]
struct Segment {
    predicate: Predicate,
    weight: f64,
    model: Model,
}

/// The model element's content.
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
    /// Number or category.
    pub function: Function,
    /// The target field, when the mining schema names one.
    pub target: Option<String>,
    /// Input (active) fields of the mining schema.
    pub inputs: Vec<String>,
    /// Derived fields, the document's first, in order of evaluation.
    derived: Vec<(String, Expr)>,
    kind: Kind,
}

/// Field values of one record.
pub type Record = HashMap<String, Value>;

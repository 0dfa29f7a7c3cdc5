//! The expressions of a parameter space: a parameter's condition (`when = "gc == 'parallel'"`)
//! and the forbidden rules of `[search]` (`"instances * threads > 64"`). Parsed once, checked
//! against the parameters' types (an unknown parameter or a string compared with a number is
//! an error naming the parameter), evaluated per configuration.
//!
//! Hand-written rather than an expression crate because the semantics are the study's own: a
//! parameter a configuration leaves inactive (its condition false) has no value, and, as in
//! irace, a comparison with it is "not available", which makes a condition false and a
//! forbidden rule not apply; and the static check needs each parameter's domain. The grammar
//! is small (precedence climbing, below).
//!
//! ```text
//! or   := and (("||" | "or") and)*
//! and  := not (("&&" | "and") not)*
//! not  := ("!" | "not") not | cmp
//! cmp  := sum (("==" | "!=" | "<" | "<=" | ">" | ">=") sum | "in" "[" sum ("," sum)* "]")?
//! sum  := prod (("+" | "-") prod)*
//! prod := unary (("*" | "/" | "%") unary)*
//! unary:= "-" unary | atom
//! atom := NUMBER | "string" | 'string' | true | false | NAME | "(" or ")"
//! ```

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::factor::Level;

mod error;
pub use error::ExprError;

/// The type of a value in an expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A number (integer and real parameters, numeric levels).
    Number,
    /// A string (string levels).
    Text,
    /// A boolean (boolean levels, comparisons, logic).
    Bool,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Number => "a number",
            Kind::Text => "a string",
            Kind::Bool => "a boolean",
        })
    }
}

/// A value while evaluating; an inactive parameter is `None` (not available).
#[derive(Clone, Debug, PartialEq)]
enum Value {
    Number(f64),
    Text(String),
    Bool(bool),
}

/// A binary operator.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

/// The parsed expression.
#[derive(Clone, Debug, PartialEq)]
enum Node {
    Number(f64),
    Text(String),
    Bool(bool),
    Param(String),
    Not(Box<Node>),
    Neg(Box<Node>),
    Binary(Op, Box<Node>, Box<Node>),
    In(Box<Node>, Vec<Node>),
}

/// An expression over a configuration's parameters, kept with its text (what a study file,
/// an error and the store show).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Expr {
    text: String,
    node: Node,
}

impl From<Expr> for String {
    fn from(e: Expr) -> String {
        e.text
    }
}

impl TryFrom<String> for Expr {
    type Error = ExprError;
    fn try_from(text: String) -> Result<Expr, ExprError> {
        Expr::parse(&text)
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Expr {
    /// Parses `text`; the error says where (the character) and what was expected.
    pub fn parse(text: &str) -> Result<Expr, ExprError> {
        let tokens = lex(text)?;
        let mut p = Parser { tokens, at: 0 };
        let node = p.or()?;
        if let Some((pos, t)) = p.tokens.get(p.at) {
            return Err(ExprError::Trailing {
                found: t.to_string(),
                at: pos + 1,
            });
        }
        Ok(Expr {
            text: text.to_string(),
            node,
        })
    }

    /// The parameters it names, each once, in order of appearance.
    pub fn names(&self) -> Vec<String> {
        let mut out = Vec::new();
        collect_names(&self.node, &mut out);
        out
    }

    /// Checks that every name is a parameter of `kinds` (its type) and that the expression is a
    /// boolean whose operators fit their operands' types. The error names what is wrong.
    pub fn check(&self, kinds: &BTreeMap<String, Kind>) -> Result<(), ExprError> {
        match kind_of(&self.node, kinds)? {
            Kind::Bool => Ok(()),
            other => Err(ExprError::NotACondition(other)),
        }
    }

    /// Whether it holds for the levels `get` gives (`None`: an inactive parameter). Anything
    /// that needs an inactive parameter's value is "not available", and an expression that is
    /// not available does not hold.
    pub fn holds<'a>(&self, get: impl Fn(&str) -> Option<&'a Level>) -> bool {
        matches!(eval(&self.node, &get), Some(Value::Bool(true)))
    }
}

fn collect_names(n: &Node, out: &mut Vec<String>) {
    match n {
        Node::Param(p) => {
            if !out.contains(p) {
                out.push(p.clone());
            }
        }
        Node::Not(a) | Node::Neg(a) => collect_names(a, out),
        Node::Binary(_, a, b) => {
            collect_names(a, out);
            collect_names(b, out);
        }
        Node::In(a, list) => {
            collect_names(a, out);
            for x in list {
                collect_names(x, out);
            }
        }
        Node::Number(_) | Node::Text(_) | Node::Bool(_) => {}
    }
}

/// The type of a level as an expression sees it.
pub fn level_kind(l: &Level) -> Kind {
    match l {
        Level::Int(_) | Level::Float(_) => Kind::Number,
        Level::Str(_) => Kind::Text,
        Level::Bool(_) => Kind::Bool,
    }
}

fn kind_of(n: &Node, kinds: &BTreeMap<String, Kind>) -> Result<Kind, ExprError> {
    Ok(match n {
        Node::Number(_) => Kind::Number,
        Node::Text(_) => Kind::Text,
        Node::Bool(_) => Kind::Bool,
        Node::Param(p) => *kinds.get(p).ok_or_else(|| ExprError::UnknownParameter {
            name: p.clone(),
            known: kinds.keys().cloned().collect::<Vec<_>>().join(", "),
        })?,
        Node::Not(a) => want(a, kinds, Kind::Bool, "`!`")?,
        Node::Neg(a) => want(a, kinds, Kind::Number, "`-`")?,
        Node::Binary(op, a, b) => {
            let (left, right) = (kind_of(a, kinds)?, kind_of(b, kinds)?);
            let op_text = op_text(*op);
            let numbers = left == Kind::Number && right == Kind::Number;
            match op {
                Op::Or | Op::And => {
                    for kind in [left, right] {
                        if kind != Kind::Bool {
                            return Err(ExprError::Joins { op: op_text, kind });
                        }
                    }
                    Kind::Bool
                }
                Op::Eq | Op::Ne if left != right => {
                    return Err(ExprError::Compares {
                        op: op_text,
                        left,
                        right,
                    });
                }
                Op::Eq | Op::Ne => Kind::Bool,
                Op::Lt | Op::Le | Op::Gt | Op::Ge if !numbers => {
                    return Err(ExprError::Orders {
                        op: op_text,
                        left,
                        right,
                    });
                }
                Op::Lt | Op::Le | Op::Gt | Op::Ge => Kind::Bool,
                Op::Add | Op::Sub | Op::Mul | Op::Div | Op::Rem if !numbers => {
                    return Err(ExprError::Arithmetic {
                        op: op_text,
                        left,
                        right,
                    });
                }
                Op::Add | Op::Sub | Op::Mul | Op::Div | Op::Rem => Kind::Number,
            }
        }
        Node::In(a, list) => {
            let k = kind_of(a, kinds)?;
            for x in list {
                let held = kind_of(x, kinds)?;
                if held != k {
                    return Err(ExprError::InList { wanted: k, held });
                }
            }
            Kind::Bool
        }
    })
}

fn want(
    n: &Node,
    kinds: &BTreeMap<String, Kind>,
    k: Kind,
    op: &'static str,
) -> Result<Kind, ExprError> {
    let got = kind_of(n, kinds)?;
    if got != k {
        return Err(ExprError::Operand { op, wanted: k, got });
    }
    Ok(k)
}

fn op_text(op: Op) -> &'static str {
    match op {
        Op::Or => "||",
        Op::And => "&&",
        Op::Eq => "==",
        Op::Ne => "!=",
        Op::Lt => "<",
        Op::Le => "<=",
        Op::Gt => ">",
        Op::Ge => ">=",
        Op::Add => "+",
        Op::Sub => "-",
        Op::Mul => "*",
        Op::Div => "/",
        Op::Rem => "%",
    }
}

fn value_of(l: &Level) -> Value {
    match l {
        Level::Int(i) => Value::Number(*i as f64),
        Level::Float(x) => Value::Number(*x),
        Level::Str(s) => Value::Text(s.clone()),
        Level::Bool(b) => Value::Bool(*b),
    }
}

/// Evaluates `n`; `None` is "not available" (an inactive parameter, or a type the check
/// rejected).
fn eval<'a>(n: &Node, get: &impl Fn(&str) -> Option<&'a Level>) -> Option<Value> {
    Some(match n {
        Node::Number(x) => Value::Number(*x),
        Node::Text(s) => Value::Text(s.clone()),
        Node::Bool(b) => Value::Bool(*b),
        Node::Param(p) => value_of(get(p)?),
        Node::Not(a) => match eval(a, get)? {
            Value::Bool(b) => Value::Bool(!b),
            _ => return None,
        },
        Node::Neg(a) => match eval(a, get)? {
            Value::Number(x) => Value::Number(-x),
            _ => return None,
        },
        Node::Binary(Op::And, a, b) => {
            // False wins over "not available", as in R's three-valued logic.
            match (eval(a, get), eval(b, get)) {
                (Some(Value::Bool(false)), _) | (_, Some(Value::Bool(false))) => Value::Bool(false),
                (Some(Value::Bool(true)), Some(Value::Bool(true))) => Value::Bool(true),
                _ => return None,
            }
        }
        Node::Binary(Op::Or, a, b) => match (eval(a, get), eval(b, get)) {
            (Some(Value::Bool(true)), _) | (_, Some(Value::Bool(true))) => Value::Bool(true),
            (Some(Value::Bool(false)), Some(Value::Bool(false))) => Value::Bool(false),
            _ => return None,
        },
        Node::Binary(op, a, b) => binary(*op, eval(a, get)?, eval(b, get)?)?,
        Node::In(a, list) => {
            let v = eval(a, get)?;
            let mut missing = false;
            for x in list {
                match eval(x, get) {
                    Some(x) if x == v => return Some(Value::Bool(true)),
                    Some(_) => {}
                    None => missing = true,
                }
            }
            if missing {
                return None;
            }
            Value::Bool(false)
        }
    })
}

fn binary(op: Op, a: Value, b: Value) -> Option<Value> {
    Some(match (op, a, b) {
        (Op::Eq, a, b) => Value::Bool(a == b),
        (Op::Ne, a, b) => Value::Bool(a != b),
        (op, Value::Number(x), Value::Number(y)) => match op {
            Op::Lt => Value::Bool(x < y),
            Op::Le => Value::Bool(x <= y),
            Op::Gt => Value::Bool(x > y),
            Op::Ge => Value::Bool(x >= y),
            Op::Add => Value::Number(x + y),
            Op::Sub => Value::Number(x - y),
            Op::Mul => Value::Number(x * y),
            // Division by zero is "not available", not infinity.
            Op::Div if y == 0.0 => return None,
            Op::Div => Value::Number(x / y),
            Op::Rem if y == 0.0 => return None,
            Op::Rem => Value::Number(x % y),
            _ => return None,
        },
        _ => return None,
    })
}

/// A token and what it is.
#[derive(Clone, Debug, PartialEq)]
enum Token {
    Number(f64),
    Text(String),
    Name(String),
    Sym(&'static str),
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::Number(x) => write!(f, "number {x}"),
            Token::Text(s) => write!(f, "string {s:?}"),
            Token::Name(n) => write!(f, "`{n}`"),
            Token::Sym(s) => write!(f, "`{s}`"),
        }
    }
}

const SYMBOLS: [&str; 19] = [
    "||", "&&", "==", "!=", "<=", ">=", "<", ">", "!", "+", "-", "*", "/", "%", "(", ")", "[", "]",
    ",",
];

/// The tokens of `text` with their character positions.
fn lex(text: &str) -> Result<Vec<(usize, Token)>, ExprError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        if c == '"' || c == '\'' {
            let end = chars[i + 1..]
                .iter()
                .position(|&d| d == c)
                .ok_or(ExprError::OpenString { at: i + 1 })?;
            out.push((
                start,
                Token::Text(chars[i + 1..i + 1 + end].iter().collect()),
            ));
            i += end + 2;
            continue;
        }
        if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) {
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric()
                    || chars[i] == '.'
                    || (matches!(chars[i], '+' | '-') && matches!(chars[i - 1], 'e' | 'E')))
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let x: f64 = word.parse().map_err(|_| ExprError::NotANumber {
                word: word.clone(),
                at: start + 1,
            })?;
            out.push((start, Token::Number(x)));
            continue;
        }
        if c.is_alphabetic() || c == '_' {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push((start, Token::Name(chars[start..i].iter().collect())));
            continue;
        }
        let rest: String = chars[i..(i + 2).min(chars.len())].iter().collect();
        let Some(sym) = SYMBOLS.iter().find(|s| rest.starts_with(**s)) else {
            return Err(ExprError::Character {
                found: c,
                at: i + 1,
            });
        };
        out.push((start, Token::Sym(sym)));
        i += sym.chars().count();
    }
    Ok(out)
}

struct Parser {
    tokens: Vec<(usize, Token)>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at).map(|(_, t)| t)
    }

    /// Takes the next token when it is `sym` (a symbol, or a word such as `and`).
    fn eat(&mut self, sym: &str) -> bool {
        let hit = match self.peek() {
            Some(Token::Sym(s)) => *s == sym,
            Some(Token::Name(n)) => n == sym,
            _ => false,
        };
        if hit {
            self.at += 1;
        }
        hit
    }

    fn expected(&self, what: &'static str) -> ExprError {
        match self.tokens.get(self.at) {
            Some((pos, t)) => ExprError::Expected {
                what,
                at: pos + 1,
                found: t.to_string(),
            },
            None => ExprError::Ended { what },
        }
    }

    fn or(&mut self) -> Result<Node, ExprError> {
        let mut left = self.and()?;
        while self.eat("||") || self.eat("or") {
            left = Node::Binary(Op::Or, Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Node, ExprError> {
        let mut left = self.not()?;
        while self.eat("&&") || self.eat("and") {
            left = Node::Binary(Op::And, Box::new(left), Box::new(self.not()?));
        }
        Ok(left)
    }

    fn not(&mut self) -> Result<Node, ExprError> {
        if self.eat("!") || self.eat("not") {
            return Ok(Node::Not(Box::new(self.not()?)));
        }
        self.cmp()
    }

    fn cmp(&mut self) -> Result<Node, ExprError> {
        let left = self.sum()?;
        for (sym, op) in [
            ("==", Op::Eq),
            ("!=", Op::Ne),
            ("<=", Op::Le),
            (">=", Op::Ge),
            ("<", Op::Lt),
            (">", Op::Gt),
        ] {
            if self.eat(sym) {
                return Ok(Node::Binary(op, Box::new(left), Box::new(self.sum()?)));
            }
        }
        if self.eat("in") {
            if !self.eat("[") {
                return Err(self.expected("`[` after `in`"));
            }
            let mut list = vec![self.sum()?];
            while self.eat(",") {
                list.push(self.sum()?);
            }
            if !self.eat("]") {
                return Err(self.expected("`,` or `]`"));
            }
            return Ok(Node::In(Box::new(left), list));
        }
        Ok(left)
    }

    fn sum(&mut self) -> Result<Node, ExprError> {
        let mut left = self.prod()?;
        loop {
            let op = if self.eat("+") {
                Op::Add
            } else if self.eat("-") {
                Op::Sub
            } else {
                return Ok(left);
            };
            left = Node::Binary(op, Box::new(left), Box::new(self.prod()?));
        }
    }

    fn prod(&mut self) -> Result<Node, ExprError> {
        let mut left = self.unary()?;
        loop {
            let op = if self.eat("*") {
                Op::Mul
            } else if self.eat("/") {
                Op::Div
            } else if self.eat("%") {
                Op::Rem
            } else {
                return Ok(left);
            };
            left = Node::Binary(op, Box::new(left), Box::new(self.unary()?));
        }
    }

    fn unary(&mut self) -> Result<Node, ExprError> {
        if self.eat("-") {
            return Ok(Node::Neg(Box::new(self.unary()?)));
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<Node, ExprError> {
        let Some(t) = self.peek().cloned() else {
            return Err(self.expected("a value, a parameter or `(`"));
        };
        let node = match t {
            Token::Number(x) => Node::Number(x),
            Token::Text(s) => Node::Text(s),
            Token::Name(n) if n == "true" => Node::Bool(true),
            Token::Name(n) if n == "false" => Node::Bool(false),
            Token::Name(n) if ["and", "or", "not", "in"].contains(&n.as_str()) => {
                return Err(self.expected("a value, a parameter or `(`"));
            }
            Token::Name(n) => Node::Param(n),
            Token::Sym("(") => {
                self.at += 1;
                let inner = self.or()?;
                if !self.eat(")") {
                    return Err(self.expected("`)`"));
                }
                return Ok(inner);
            }
            Token::Sym(_) => return Err(self.expected("a value, a parameter or `(`")),
        };
        self.at += 1;
        Ok(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds() -> BTreeMap<String, Kind> {
        [
            ("gc", Kind::Text),
            ("threads", Kind::Number),
            ("instances", Kind::Number),
            ("echo", Kind::Bool),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    fn holds(text: &str, levels: &[(&str, Level)]) -> bool {
        let e = Expr::parse(text).unwrap();
        e.check(&kinds()).unwrap();
        e.holds(|name| levels.iter().find(|(n, _)| *n == name).map(|(_, l)| l))
    }

    #[test]
    fn comparisons_arithmetic_and_logic_evaluate_as_written() {
        let l = [
            ("gc", Level::Str("parallel".into())),
            ("threads", Level::Int(8)),
            ("instances", Level::Int(3)),
            ("echo", Level::Bool(false)),
        ];
        assert!(holds("gc == 'parallel'", &l));
        assert!(holds("gc == \"parallel\" && threads >= 8", &l));
        assert!(!holds("instances * threads > 24", &l));
        assert!(holds("instances * threads >= 24 and not echo", &l));
        assert!(holds("threads % 4 == 0 || gc in ['serial']", &l));
        assert!(holds("gc in ['serial', 'parallel']", &l));
        assert!(holds("-threads + 10 == 2", &l));
        assert!(holds("(threads - 2) / 3 == 2", &l));
        assert!(
            !holds("threads / (instances - 3) > 1", &l),
            "division by zero is n/a"
        );
    }

    #[test]
    fn an_inactive_parameter_makes_a_comparison_not_hold_unless_logic_decides_without_it() {
        let l = [
            ("gc", Level::Str("serial".into())),
            ("instances", Level::Int(2)),
        ];
        // threads is inactive here.
        assert!(!holds("threads > 2", &l));
        assert!(!holds("!(threads > 2)", &l));
        assert!(!holds("threads > 2 && instances == 2", &l));
        assert!(holds("threads > 2 || instances == 2", &l));
        assert!(!holds("threads > 2 && instances == 5", &l));
    }

    #[test]
    fn names_are_listed_once_in_order() {
        let e = Expr::parse("threads * instances > 8 && gc != 'x' && threads < 64").unwrap();
        assert_eq!(e.names(), ["threads", "instances", "gc"]);
    }

    #[test]
    fn bad_expressions_say_where_and_what() {
        let check = |t: &str| {
            Expr::parse(t)
                .and_then(|e| e.check(&kinds()))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            check("gc_threds > 2"),
            "\"gc_threds\" is not a parameter of this study; known: echo, gc, instances, threads"
        );
        assert!(
            check("gc > 2").contains("orders numbers"),
            "{}",
            check("gc > 2")
        );
        assert!(check("gc == 2").contains("compares a string with a number"));
        assert!(check("threads + 1").contains("not a condition"));
        assert!(
            check("threads = 2").contains("character 9"),
            "{}",
            check("threads = 2")
        );
        assert!(check("threads > ").contains("at the end"));
        assert!(check("gc == 'x").contains("not closed"));
        assert!(check("(threads > 2").contains("`)`"));
        assert!(check("threads > 2 2").contains("unexpected number 2"));
    }

    #[test]
    fn an_expression_keeps_its_text_through_serde() {
        let e = Expr::parse("threads > 2 && gc == 'x'").unwrap();
        let s = serde_json::to_string(&e).unwrap();
        assert_eq!(s, "\"threads > 2 && gc == 'x'\"");
        let back: Expr = serde_json::from_str(&s).unwrap();
        assert_eq!(back, e);
    }
}

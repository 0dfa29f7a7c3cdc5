//! What is wrong with an expression: where (the character, from 1) and what was expected, or
//! which parameter or operator does not fit.

use super::Kind;

/// An expression that does not parse or does not type-check.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    /// A string whose quote is not closed.
    #[error("the string at character {at} is not closed")]
    OpenString {
        /// Where the string starts (from 1).
        at: usize,
    },
    /// A word that starts like a number but is not one.
    #[error("{word:?} at character {at} is not a number")]
    NotANumber {
        /// The word.
        word: String,
        /// Where it starts (from 1).
        at: usize,
    },
    /// A character no token starts with.
    #[error(
        "unexpected {found:?} at character {at}: use ==, !=, <, <=, >, >=, in [..], &&, ||, !, + - * / % and parentheses"
    )]
    Character {
        /// The character.
        found: char,
        /// Where (from 1).
        at: usize,
    },
    /// A token where another was expected.
    #[error("expected {what} at character {at}, found {found}")]
    Expected {
        /// What the grammar expected.
        what: &'static str,
        /// Where (from 1).
        at: usize,
        /// The token found.
        found: String,
    },
    /// The text ended where more was expected.
    #[error("expected {what} at the end")]
    Ended {
        /// What the grammar expected.
        what: &'static str,
    },
    /// A token after a complete expression.
    #[error("unexpected {found} at character {at}: expected an operator or the end")]
    Trailing {
        /// The token.
        found: String,
        /// Where (from 1).
        at: usize,
    },
    /// A name that is not a parameter of the study.
    #[error("{name:?} is not a parameter of this study; known: {known}")]
    UnknownParameter {
        /// The name.
        name: String,
        /// The parameters, comma-separated.
        known: String,
    },
    /// The whole expression is not a condition.
    #[error("is {0}, not a condition: compare it (`== 2`, `> 8`, `in [\"a\", \"b\"]`)")]
    NotACondition(Kind),
    /// `&&` or `||` joining something other than conditions.
    #[error("`{op}` joins conditions, not {kind}")]
    Joins {
        /// The operator.
        op: &'static str,
        /// The operand's type.
        kind: Kind,
    },
    /// `==` or `!=` between two types.
    #[error("`{op}` compares {left} with {right}: compare like with like (strings in quotes)")]
    Compares {
        /// The operator.
        op: &'static str,
        /// The left operand's type.
        left: Kind,
        /// The right operand's type.
        right: Kind,
    },
    /// An ordering of something other than numbers.
    #[error("`{op}` orders numbers, not {left} and {right}")]
    Orders {
        /// The operator.
        op: &'static str,
        /// The left operand's type.
        left: Kind,
        /// The right operand's type.
        right: Kind,
    },
    /// Arithmetic on something other than numbers.
    #[error("`{op}` takes numbers, not {left} and {right}")]
    Arithmetic {
        /// The operator.
        op: &'static str,
        /// The left operand's type.
        left: Kind,
        /// The right operand's type.
        right: Kind,
    },
    /// `in` with a list of another type.
    #[error("`in` looks for {wanted} in a list holding {held}")]
    InList {
        /// The type looked for.
        wanted: Kind,
        /// The type of a list item.
        held: Kind,
    },
    /// A unary operator on the wrong type.
    #[error("{op} takes {wanted}, not {got}")]
    Operand {
        /// The operator (`` `!` `` or `` `-` ``).
        op: &'static str,
        /// The type it takes.
        wanted: Kind,
        /// The type it got.
        got: Kind,
    },
}

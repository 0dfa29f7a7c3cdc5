//! Enums stored as one word per variant in one column (a trial's phase, an action's state):
//! one macro gives each its text, `Display`, `FromStr`, SQLite's `ToSql`/`FromSql` and serde,
//! and one error for a word the column does not know.

/// A stored word its column does not know: the store was written by another perfpilot, or
/// edited by hand.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{table}.{column}: unknown value {value:?} (known: {known}); a newer perfpilot may have \
     written it, or it was edited: upgrade perfpilot, or use another store"
)]
pub struct UnknownValue {
    /// The table holding the value.
    pub table: &'static str,
    /// The column holding the value.
    pub column: &'static str,
    /// The value found.
    pub value: String,
    /// The values the column may hold, comma-separated.
    pub known: String,
}

/// An enum stored as one word per variant in one column: its text, `Display` (padding
/// honoured), `FromStr`, SQLite's `ToSql`/`FromSql` and serde, all from the one table of words.
macro_rules! stored_word {
    (
        $(#[$meta:meta])*
        $name:ident in $table:literal . $column:literal {
            $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &[$name] = &[$($name::$variant,)+];

            /// The word stored for it (and shown, and serialized).
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The value stored as `word`; an unknown word names the table and column.
            pub fn from_word(word: &str) -> std::result::Result<$name, $crate::word::UnknownValue> {
                match word {
                    $($text => Ok($name::$variant),)+
                    _ => Err($crate::word::UnknownValue {
                        table: $table,
                        column: $column,
                        value: word.to_string(),
                        known: [$($text,)+].join(", "),
                    }),
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.pad(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::word::UnknownValue;
            fn from_str(s: &str) -> std::result::Result<$name, $crate::word::UnknownValue> {
                $name::from_word(s)
            }
        }

        impl ::rusqlite::types::ToSql for $name {
            fn to_sql(&self) -> ::rusqlite::Result<::rusqlite::types::ToSqlOutput<'_>> {
                Ok(::rusqlite::types::ToSqlOutput::from(self.as_str()))
            }
        }

        impl ::rusqlite::types::FromSql for $name {
            fn column_result(
                value: ::rusqlite::types::ValueRef<'_>,
            ) -> ::rusqlite::types::FromSqlResult<$name> {
                $name::from_word(value.as_str()?).map_err(|e| ::rusqlite::types::FromSqlError::Other(Box::new(e)))
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(
                &self,
                s: S,
            ) -> std::result::Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(
                d: D,
            ) -> std::result::Result<$name, D::Error> {
                let word = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                $name::from_word(&word).map_err(serde::de::Error::custom)
            }
        }
    };
}

pub(crate) use stored_word;

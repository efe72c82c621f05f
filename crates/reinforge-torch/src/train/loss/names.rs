//! Enums whose variants are selected by fixed names (verl's spelling), for configuration files
//! and the command line.

/// Declares a fieldless enum whose variants have fixed string names: serde reads and writes
/// them (an unknown name is an error listing every valid one), [`std::str::FromStr`] accepts
/// them with the same kind of error, and `ALL`, `NAMES` and `name()` serve help texts.
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident ($what:literal) {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        $vis enum $name {
            $( $(#[$vmeta])* #[serde(rename = $text)] $variant, )+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// Every name, in declaration order (for help texts).
            pub const NAMES: &'static [&'static str] = &[$($text),+];

            /// The variant's name.
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err(format!(
                        "unknown {} `{other}`, expected one of: {}",
                        $what,
                        Self::NAMES.join(", ")
                    )),
                }
            }
        }
    };
}

pub(crate) use named_enum;

//! Settings the benches read from the environment (included by each with `#[path]`: an
//! example cannot depend on another, and the library has no place for bench settings).

use std::str::FromStr;

/// The value of the environment variable `name` parsed as `T`, or `default` when it is unset
/// or does not parse.
pub fn env_or<T: FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

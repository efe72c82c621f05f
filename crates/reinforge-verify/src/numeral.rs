//! Written forms of numbers that the lexer does not read on its own, rewritten to plain exact
//! arithmetic before parsing: repeating decimals, mixed numbers, vulgar-fraction characters and
//! digit grouping other than `1,000,000`.
//!
//! Each rewrite only fires on an unambiguous form and produces a parenthesised exact value, so
//! `0.(3)` becomes `(1/3)` (not the decimal 0.3 with a rounding tolerance) and `3 1/2` becomes
//! `(3+1/2)` (not `3·1/2`). Rust's `regex` crate runs in linear time, like the rest of the
//! normaliser.

use num_bigint::BigInt;
use num_integer::Integer;
use regex::{Captures, Regex};
use std::sync::LazyLock;

/// Longest digit string a repeating-decimal rewrite accepts (bounds the big-integer work).
const MAX_REPEAT_DIGITS: usize = 60;

/// Applies every numeral rewrite, in an order where none can feed a false match to the next.
pub fn rewrite(s: &str) -> String {
    let s = repeating_decimals(s);
    let s = digit_groups(&s);
    let s = vulgar_fractions(&s);
    mixed_numbers(&s)
}

/// `int.pre` followed by the repeating block `rep`, as the exact fraction `(n/d)`.
fn repeating_fraction(int: &str, pre: &str, rep: &str) -> Option<String> {
    if pre.len() + rep.len() + int.len() > MAX_REPEAT_DIGITS || rep.is_empty() {
        return None;
    }
    // x = int.pre(rep): x·10^|pre|·(10^|rep| − 1) = (int pre rep) − (int pre)
    let whole: BigInt = format!("{int}{pre}{rep}").parse().ok()?;
    let head: BigInt = format!("{int}{pre}").parse().ok()?;
    let ten = BigInt::from(10);
    let den = num_traits::pow(ten.clone(), pre.len()) * (num_traits::pow(ten, rep.len()) - 1);
    let num = whole - head;
    let g = num.gcd(&den);
    Some(format!("({}/{})", num / &g, den / &g))
}

/// `0.(3)`, `0.1(6)`, `0.\overline{3}`, `0.\bar{3}`, `0.\dot{3}`, and `0.333...` / `0.1212…` /
/// `0.3\ldots` where the written digits visibly repeat (a one-digit block at least three
/// times, a longer block at least twice) before the ellipsis.
pub fn repeating_decimals(s: &str) -> String {
    static MARKED: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r"(\d+)\.(\d*)(?:\((\d+)\)|\\(?:overline|bar|dot)\s*\{(\d+)\}|\\(?:overline|bar|dot)\s*(\d))",
        )
        .unwrap()
    });
    static ELLIPSIS: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(\d+)\.(\d+)(?:\.\.\.|…|\\ldots|\\cdots|\\dots)").unwrap());
    let s = MARKED.replace_all(s, |c: &Captures| {
        let rep = c
            .get(3)
            .or(c.get(4))
            .or(c.get(5))
            .map_or("", |m| m.as_str());
        repeating_fraction(&c[1], &c[2], rep).unwrap_or_else(|| c[0].to_string())
    });
    ELLIPSIS
        .replace_all(&s, |c: &Captures| {
            visible_period(&c[2])
                .and_then(|(pre, rep)| repeating_fraction(&c[1], pre, rep))
                .unwrap_or_else(|| c[0].to_string())
        })
        .into_owned()
}

/// Splits fractional digits into (non-repeating prefix, repeating block) when their tail shows
/// the block clearly: the shortest block (up to 6 digits) that ends the digits and is written
/// out at least three times (one digit) or twice (longer blocks).
fn visible_period(frac: &str) -> Option<(&str, &str)> {
    let b = frac.as_bytes();
    for p in 1..=6.min(b.len() / 2) {
        let need = if p == 1 { 3 } else { 2 };
        if b.len() < need * p {
            continue;
        }
        let block = &b[b.len() - p..];
        let mut k = 1;
        while (k + 1) * p <= b.len() && &b[b.len() - (k + 1) * p..b.len() - k * p] == block {
            k += 1;
        }
        if k >= need {
            // the prefix is whatever precedes the repeated copies
            let start = b.len() - k * p;
            return Some((&frac[..start], &frac[start..start + p]));
        }
    }
    None
}

/// Digit grouping beyond `1,000,000` (which the caller's thousands rule already reads): Indian
/// lakh/crore grouping `1,00,000` / `12,34,567`, apostrophes `1'000'000` (also `’`), dots with at
/// least two groups `1.000.000` (one group, `1.000`, stays a decimal), and thin or no-break
/// spaces between groups (turned into plain spaces for the thousands rule).
pub fn digit_groups(s: &str) -> String {
    static INDIAN: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(^|[^\d.,])(\d{1,2}(?:,\d{2})+,\d{3})($|[^\d,])").unwrap());
    static APOSTROPHE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(^|[^\d.,])(\d{1,3}(?:['’]\d{3})+)($|[^\d'’])").unwrap());
    static DOTS: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(^|[^\d.,])(\d{1,3}(?:\.\d{3}){2,})($|[^\d.]|\.(?:\s|$))").unwrap()
    });
    let digits_only = |c: &Captures| {
        let d: String = c[2].chars().filter(|x| x.is_ascii_digit()).collect();
        format!("{}{}{}", &c[1], d, &c[3])
    };
    let s = INDIAN.replace_all(s, digits_only);
    let s = APOSTROPHE.replace_all(&s, digits_only);
    let s = DOTS.replace_all(&s, digits_only);
    thin_spaces_to_spaces(&s)
}

/// Thin, narrow no-break and no-break spaces between digits as plain spaces.
fn thin_spaces_to_spaces(s: &str) -> String {
    let c: Vec<char> = s.chars().collect();
    let digit = |i: Option<usize>| i.and_then(|i| c.get(i)).is_some_and(|d| d.is_ascii_digit());
    c.iter()
        .enumerate()
        .map(|(i, &x)| {
            let thin = matches!(x, '\u{2009}' | '\u{202F}' | '\u{00A0}');
            if thin && digit(i.checked_sub(1)) && digit(Some(i + 1)) {
                ' '
            } else {
                x
            }
        })
        .collect()
}

/// Unicode vulgar fractions (`½`, `3¾`) as exact fractions; a preceding integer is a mixed number.
pub fn vulgar_fractions(s: &str) -> String {
    const VULGAR: &[(char, &str)] = &[
        ('½', "1/2"),
        ('⅓', "1/3"),
        ('⅔', "2/3"),
        ('¼', "1/4"),
        ('¾', "3/4"),
        ('⅕', "1/5"),
        ('⅖', "2/5"),
        ('⅗', "3/5"),
        ('⅘', "4/5"),
        ('⅙', "1/6"),
        ('⅚', "5/6"),
        ('⅛', "1/8"),
        ('⅜', "3/8"),
        ('⅝', "5/8"),
        ('⅞', "7/8"),
    ];
    if !s.chars().any(|c| VULGAR.iter().any(|(v, _)| *v == c)) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match VULGAR.iter().find(|(v, _)| *v == c) {
            Some((_, f)) => {
                let digits = out.len() - out.trim_end_matches(|d: char| d.is_ascii_digit()).len();
                let int = out.split_off(out.len() - digits);
                out.push_str(&if int.is_empty() {
                    format!("({f})")
                } else {
                    format!("({int}+{f})")
                });
            }
            None => out.push(c),
        }
    }
    out
}

/// `3 1/2` (an integer, one space, a proper fraction of plain integers) as `(3+1/2)`; a minus
/// sign in front applies to the whole mixed number, as written. Improper fractions (`3 5/2`) and
/// anything glued to further digits, points or slashes are left alone.
pub fn mixed_numbers(s: &str) -> String {
    static MIXED: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(^|[^\d.,/^_])(\d+) (\d+)/(\d+)($|[^\d./^_])").unwrap());
    MIXED
        .replace_all(s, |c: &Captures| {
            let proper = match (c[3].parse::<u64>(), c[4].parse::<u64>()) {
                (Ok(n), Ok(d)) => n < d && d > 0,
                _ => false,
            };
            if proper {
                format!("{}({}+{}/{}){}", &c[1], &c[2], &c[3], &c[4], &c[5])
            } else {
                c[0].to_string()
            }
        })
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeating_forms_become_exact_fractions() {
        assert_eq!(repeating_decimals("0.(3)"), "(1/3)");
        assert_eq!(repeating_decimals("0.1(6)"), "(1/6)");
        assert_eq!(repeating_decimals("0.\\overline{142857}"), "(1/7)");
        assert_eq!(repeating_decimals("1.\\bar{3}"), "(4/3)");
        assert_eq!(repeating_decimals("0.333..."), "(1/3)");
        assert_eq!(repeating_decimals("0.1212…"), "(4/33)");
        assert_eq!(repeating_decimals("0.8333\\ldots"), "(5/6)");
    }

    #[test]
    fn unclear_ellipses_are_left_alone() {
        // a single digit, or a block written once, is not a visible period
        assert_eq!(repeating_decimals("0.5..."), "0.5...");
        assert_eq!(repeating_decimals("0.12..."), "0.12...");
        assert_eq!(repeating_decimals("1, 2, 3, ..."), "1, 2, 3, ...");
    }

    #[test]
    fn digit_grouping_styles() {
        assert_eq!(digit_groups("1,00,000"), "100000");
        assert_eq!(digit_groups("12,34,567 rupees"), "1234567 rupees");
        assert_eq!(digit_groups("1'000'000"), "1000000");
        assert_eq!(digit_groups("1.000.000"), "1000000");
        assert_eq!(digit_groups("1.000"), "1.000", "one dot group is a decimal");
        assert_eq!(
            digit_groups("1,000,000"),
            "1,000,000",
            "left to the thousands rule"
        );
        assert_eq!(digit_groups("(1,10)"), "(1,10)");
        assert_eq!(digit_groups("1\u{2009}000\u{2009}000"), "1 000 000");
    }

    #[test]
    fn mixed_numbers_and_vulgar_fractions() {
        assert_eq!(mixed_numbers("3 1/2"), "(3+1/2)");
        assert_eq!(mixed_numbers("-3 1/2"), "-(3+1/2)");
        assert_eq!(
            mixed_numbers("3 5/2"),
            "3 5/2",
            "improper: not a mixed number"
        );
        assert_eq!(mixed_numbers("x^2 1/2"), "x^2 1/2");
        assert_eq!(vulgar_fractions("3½"), "(3+1/2)");
        assert_eq!(vulgar_fractions("¾ cup"), "(3/4) cup");
    }
}

//! Bounded exact rational arithmetic.
//!
//! Every operation checks the size of its result: numbers whose numerator or denominator would
//! exceed [`MAX_BITS`] bits are refused (`None`) instead of computed. This is what replaces
//! timeouts for "power towers" and other size blow-ups. A refused value is never compared in
//! floating point (where `2^{2^{100}}` and `2^{2^{100}}+1` round to the same infinity): the
//! comparison is undecided ([`crate::eval::too_large`]) and scores 0.

use num_bigint::BigInt;
use num_rational::BigRational;
use num_traits::{One, Signed, ToPrimitive, Zero};

/// Largest numerator/denominator size, in bits, that exact arithmetic will produce.
pub const MAX_BITS: u64 = 4096;

/// An exact rational number.
pub type Rat = BigRational;

fn ok(r: Rat) -> Option<Rat> {
    if r.numer().bits() > MAX_BITS || r.denom().bits() > MAX_BITS {
        None
    } else {
        Some(r)
    }
}

/// Sum with size check.
pub fn add(a: &Rat, b: &Rat) -> Option<Rat> {
    ok(a + b)
}

/// Product with size check.
pub fn mul(a: &Rat, b: &Rat) -> Option<Rat> {
    ok(a * b)
}

/// Quotient; `None` on division by zero or oversize.
pub fn div(a: &Rat, b: &Rat) -> Option<Rat> {
    if b.is_zero() {
        None
    } else {
        ok(a / b)
    }
}

/// Integer power `a^e`, refused when the result would exceed [`MAX_BITS`].
pub fn pow(a: &Rat, e: &Rat) -> Option<Rat> {
    if !e.is_integer() {
        return None;
    }
    let e = e.to_integer().to_i64()?;
    if a.is_zero() {
        return if e > 0 {
            Some(Rat::zero())
        } else if e == 0 {
            Some(Rat::one())
        } else {
            None
        };
    }
    let bits = a.numer().bits().max(a.denom().bits()).max(1);
    if (e.unsigned_abs()).saturating_mul(bits) > MAX_BITS + 64 {
        return None;
    }
    let base = if e < 0 { a.recip() } else { a.clone() };
    ok(num_traits::pow(base, e.unsigned_abs() as usize))
}

/// Exact square root when `a` is the square of a rational.
pub fn sqrt_exact(a: &Rat) -> Option<Rat> {
    if a.is_negative() {
        return None;
    }
    let n = a.numer().sqrt();
    let d = a.denom().sqrt();
    if &n * &n == *a.numer() && &d * &d == *a.denom() {
        Some(Rat::new(n, d))
    } else {
        None
    }
}

/// Integer from decimal digits.
pub fn int(digits: &str) -> Option<Rat> {
    if digits.len() > 1200 {
        return None;
    }
    digits.parse::<BigInt>().ok().map(Rat::from_integer)
}

/// Rational from a small integer.
pub fn small(n: i64) -> Rat {
    Rat::from_integer(BigInt::from(n))
}

/// `10^k` as a rational.
pub fn pow10(k: u32) -> Rat {
    Rat::from_integer(num_traits::pow(BigInt::from(10), k as usize))
}

/// Float approximation (may be infinite for huge values).
pub fn to_f64(a: &Rat) -> f64 {
    a.to_f64().unwrap_or_else(|| {
        // Ratio of two huge integers: scale by bit lengths.
        let nb = a.numer().bits() as i64;
        let db = a.denom().bits() as i64;
        let shift = nb - db;
        if shift > 1100 {
            if a.is_negative() {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            }
        } else if shift < -1100 {
            0.0
        } else {
            f64::NAN
        }
    })
}

/// Factorial of a small non-negative integer, bounded.
pub fn factorial(a: &Rat) -> Option<Rat> {
    if !a.is_integer() || a.is_negative() {
        return None;
    }
    let n = a.to_integer().to_u32()?;
    if n > 300 {
        return None;
    }
    let mut acc = BigInt::one();
    for i in 2..=n {
        acc *= i;
    }
    ok(Rat::from_integer(acc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_tower_is_refused_not_computed() {
        let two = small(2);
        let big = small(100_000);
        assert!(pow(&two, &big).is_none());
        assert_eq!(pow(&two, &small(10)).unwrap(), small(1024));
        assert_eq!(pow(&two, &small(-2)).unwrap(), Rat::new(1.into(), 4.into()));
    }

    #[test]
    fn exact_roots() {
        assert_eq!(
            sqrt_exact(&Rat::new(9.into(), 4.into())),
            Some(Rat::new(3.into(), 2.into()))
        );
        assert!(sqrt_exact(&small(2)).is_none());
    }
}

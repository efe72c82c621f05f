//! Tests of `reinforge_recipes::data::evaluate` through its public API (moved out of the library source).

use reinforge_recipes::data::evaluate::*;

#[test]
fn eval_rows_are_evenly_spaced_and_capped() {
    assert_eq!(eval_rows(12, 3), vec![0, 4, 8]);
    assert_eq!(eval_rows(3, 10), vec![0, 1, 2]);
    assert!(eval_rows(0, 5).is_empty());
}

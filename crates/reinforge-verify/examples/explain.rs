//! Debug helper: `cargo run --example explain -- GOLD PRED` prints what was extracted, the
//! parse trees and the verdict.
use reinforge_verify::{extract, parse_answer, verify, Options};

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let (g, p) = (
        a.first().cloned().unwrap_or_default(),
        a.get(1).cloned().unwrap_or_default(),
    );
    let o = Options::default();
    for (name, s) in [("gold", &g), ("pred", &p)] {
        let s = reinforge_verify::normalize::repair_escapes(s);
        let e = extract::extract(
            &s,
            &o.extraction_targets,
            &o.string_extraction.strings,
            true,
        );
        println!("{name}: extracted {e:?}");
        if let Some(e) = e {
            println!("{name}: parsed {:?}", parse_answer(&e.text, &o));
        }
    }
    println!("{:?}", verify(&g, &p, &o));
}

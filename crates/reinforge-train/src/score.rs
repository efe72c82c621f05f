//! `reinforge score`: per-token log-probs of prompt/completion rows (moving here from the binary, issue 25).

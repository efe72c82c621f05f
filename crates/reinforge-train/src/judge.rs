//! The LLM judge (`reinforge judge`, `type = "judge"` reward components) (moving here from the binary, issue 25).

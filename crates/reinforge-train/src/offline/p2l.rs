//! `train-p2l` and P2L leaderboards (moving here from the binary, issue 25).

//! The algorithm catalogue that needs no autograd.

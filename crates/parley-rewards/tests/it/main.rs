//! Integration tests of parley-rewards: agreement with math-verify on a committed sample.

mod math_agreement;
mod never_panics;

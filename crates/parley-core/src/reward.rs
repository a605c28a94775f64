//! The score of one finished trajectory.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A reward and the diagnostic fields the scorer produced beside it (for NeMo Gym environments
/// these are the verify response's extra fields, such as `accuracy` and `set_overlap`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reward {
    pub value: f64,
    #[serde(default)]
    pub breakdown: Map<String, Value>,
}

impl Reward {
    pub fn new(value: f64) -> Reward {
        Reward { value, breakdown: Map::new() }
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Reward {
        self.breakdown.insert(key.to_owned(), value.into());
        self
    }
}

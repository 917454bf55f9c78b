//! Splitting the work among several committer schedules: each topic (and so its
//! table) belongs to exactly one shard, by a stable hash of the topic name, so that
//! `n` schedules with inputs `{"shard": i, "shards": n}` cover every table once.

use crate::hash::fnv1a;

/// One shard of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This shard, `0..count`.
    pub index: u32,
    /// How many shards there are (at least one).
    pub count: u32,
}

impl Default for Shard {
    fn default() -> Self {
        Self { index: 0, count: 1 }
    }
}

impl Shard {
    /// Shard `index` of `count`, checked.
    pub fn new(index: u32, count: u32) -> Result<Self, String> {
        if count == 0 || index >= count {
            return Err(format!(
                "shard {index} of {count}: the index must be below a non-zero count"
            ));
        }
        Ok(Self { index, count })
    }

    /// Whether this shard handles `topic`.
    pub fn owns(&self, topic: &str) -> bool {
        self.count <= 1 || fnv1a(topic.as_bytes()) % u64::from(self.count) == u64::from(self.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_topic_has_exactly_one_shard() {
        for count in 1..6 {
            for t in 0..200 {
                let topic = format!("topic-{t}");
                let owners = (0..count)
                    .filter(|&i| Shard::new(i, count).is_ok_and(|s| s.owns(&topic)))
                    .count();
                assert_eq!(owners, 1, "{topic} of {count}");
            }
        }
        assert!(Shard::new(2, 2).is_err());
        assert!(Shard::new(0, 0).is_err());
    }
}

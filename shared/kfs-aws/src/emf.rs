//! CloudWatch Embedded Metric Format: one JSON log line per metric set, which
//! CloudWatch turns into metrics without any API call from the function.

use serde_json::{Map, Value, json};

/// The CloudWatch namespace of every metric.
pub const NAMESPACE: &str = "kfs-iceberg";

/// One EMF record: a set of metrics sharing dimensions.
#[derive(Debug, Clone, Default)]
pub struct MetricSet {
    dimensions: Vec<(String, String)>,
    metrics: Vec<(String, f64, &'static str)>,
}

impl MetricSet {
    /// A set with these dimensions (e.g. `[("Function", "converter")]`).
    pub fn new(dimensions: &[(&str, &str)]) -> Self {
        Self {
            dimensions: dimensions
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            metrics: Vec::new(),
        }
    }

    /// Adds a metric with its CloudWatch unit (`Count`, `Bytes`, `Milliseconds`, `Seconds`).
    pub fn put(mut self, name: &str, value: f64, unit: &'static str) -> Self {
        self.metrics.push((name.to_owned(), value, unit));
        self
    }

    /// The EMF JSON line, timestamped `now_ms`.
    pub fn to_json(&self, now_ms: i64) -> String {
        let mut root = Map::new();
        let names: Vec<Value> = self
            .dimensions
            .iter()
            .map(|(k, _)| Value::from(k.clone()))
            .collect();
        let metrics: Vec<Value> = self
            .metrics
            .iter()
            .map(|(name, _, unit)| json!({"Name": name, "Unit": unit}))
            .collect();
        root.insert(
            "_aws".into(),
            json!({"Timestamp": now_ms, "CloudWatchMetrics": [{"Namespace": NAMESPACE, "Dimensions": [names], "Metrics": metrics}]}),
        );
        for (k, v) in &self.dimensions {
            root.insert(k.clone(), Value::from(v.clone()));
        }
        for (name, value, _) in &self.metrics {
            root.insert(name.clone(), json!(value));
        }
        Value::Object(root).to_string()
    }

    /// Writes the EMF line to stdout, where Lambda's log capture picks it up.
    pub fn emit(&self, now_ms: i64) {
        println!("{}", self.to_json(now_ms));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_embedded_metric_format() {
        let line = MetricSet::new(&[("Table", "kafscale.orders")])
            .put("RecordsConverted", 12.0, "Count")
            .to_json(5);
        let value: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        assert_eq!(value["Table"], "kafscale.orders");
        assert_eq!(value["RecordsConverted"], 12.0);
        assert_eq!(
            value["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0][0],
            "Table"
        );
        assert_eq!(
            value["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Unit"],
            "Count"
        );
    }
}

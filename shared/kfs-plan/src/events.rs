//! Reading the events that announce new segment objects: S3 event notifications
//! (delivered directly or inside SQS messages) and EventBridge "Object Created" events.
//!
//! Parsing is lenient about fields we do not use (local S3 servers omit several), and
//! strict about the ones we do. Keys arrive URL-encoded (`+` for a space) and are
//! decoded here: `aws_lambda_events` leaves its decoded key empty. KafScale keys hold
//! only `[A-Za-z0-9._/-]`, so decoding an already plain key changes nothing.

use serde::Deserialize;
use serde_json::Value;

/// One object creation announced by an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectCreated {
    /// Bucket.
    pub bucket: String,
    /// Object key, decoded.
    pub key: String,
    /// ETag, without quotes, when the event carries it.
    pub etag: Option<String>,
    /// The S3 sequencer: orders events for the same key only.
    pub sequencer: Option<String>,
    /// Size in bytes, when the event carries it.
    pub size: Option<u64>,
}

/// What an event body holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventBody {
    /// Objects were created.
    Created(Vec<ObjectCreated>),
    /// The `s3:TestEvent` S3 sends when a notification is configured.
    TestEvent,
    /// An event of another kind (deletions, other services): nothing to do.
    Other(String),
}

/// An event body could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unreadable event: {0}")]
pub struct EventError(pub String);

#[derive(Deserialize)]
struct S3Record {
    #[serde(rename = "eventSource", default)]
    event_source: Option<String>,
    #[serde(rename = "eventName", default)]
    event_name: String,
    s3: S3Entity,
}

#[derive(Deserialize)]
struct S3Entity {
    bucket: S3Bucket,
    object: S3Object,
}

#[derive(Deserialize)]
struct S3Bucket {
    name: String,
}

#[derive(Deserialize)]
struct S3Object {
    key: String,
    #[serde(default)]
    size: Option<u64>,
    #[serde(rename = "eTag", alias = "etag", default)]
    etag: Option<String>,
    #[serde(default)]
    sequencer: Option<String>,
}

/// Decodes an S3 event key: `+` is a space, `%XX` a byte.
pub fn decode_key(raw: &str) -> Result<String, EventError> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| EventError(format!("bad escape in key {raw:?} at {i}")))?;
                out.push(hex);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| EventError(format!("key {raw:?} does not decode to UTF-8")))
}

fn unquote(etag: Option<String>) -> Option<String> {
    etag.map(|e| e.trim_matches('"').to_owned())
        .filter(|e| !e.is_empty())
}

/// Reads an S3 event notification (`{"Records": [...]}` or the test event).
pub fn parse_s3_notification(body: &Value) -> Result<EventBody, EventError> {
    if body.get("Event").and_then(Value::as_str) == Some("s3:TestEvent") {
        return Ok(EventBody::TestEvent);
    }
    let Some(records) = body.get("Records").and_then(Value::as_array) else {
        return Err(EventError("no Records array".into()));
    };
    let mut created = Vec::new();
    for record in records {
        let record: S3Record =
            serde_json::from_value(record.clone()).map_err(|e| EventError(e.to_string()))?;
        if record
            .event_source
            .as_deref()
            .is_some_and(|s| s != "aws:s3")
        {
            return Ok(EventBody::Other(format!(
                "event source {:?}",
                record.event_source
            )));
        }
        if !record.event_name.starts_with("ObjectCreated") {
            continue;
        }
        created.push(ObjectCreated {
            bucket: record.s3.bucket.name,
            key: decode_key(&record.s3.object.key)?,
            etag: unquote(record.s3.object.etag),
            sequencer: record.s3.object.sequencer,
            size: record.s3.object.size,
        });
    }
    Ok(EventBody::Created(created))
}

/// Reads an EventBridge event; only S3 "Object Created" events create objects.
pub fn parse_eventbridge(body: &Value) -> Result<EventBody, EventError> {
    let detail_type = body
        .get("detail-type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if body.get("source").and_then(Value::as_str) != Some("aws.s3")
        || detail_type != "Object Created"
    {
        return Ok(EventBody::Other(format!("EventBridge {detail_type:?}")));
    }
    let detail = body
        .get("detail")
        .ok_or_else(|| EventError("no detail".into()))?;
    let text = |path: &[&str]| {
        path.iter()
            .try_fold(detail, |v, k| v.get(k))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let bucket =
        text(&["bucket", "name"]).ok_or_else(|| EventError("no detail.bucket.name".into()))?;
    let key = text(&["object", "key"]).ok_or_else(|| EventError("no detail.object.key".into()))?;
    Ok(EventBody::Created(vec![ObjectCreated {
        bucket,
        key: decode_key(&key)?,
        etag: unquote(text(&["object", "etag"])),
        sequencer: text(&["object", "sequencer"]),
        size: detail
            .get("object")
            .and_then(|o| o.get("size"))
            .and_then(Value::as_u64),
    }]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decodes_keys() {
        assert_eq!(decode_key("a+b%2Fc"), Ok("a b/c".into()));
        assert_eq!(decode_key("plain/key-1.kfs"), Ok("plain/key-1.kfs".into()));
        assert!(decode_key("bad%zz").is_err());
        assert!(decode_key("bad%4").is_err());
    }

    #[test]
    fn reads_lenient_s3_records_and_test_events() {
        let body = json!({"Records": [{"eventName": "ObjectCreated:Put", "s3": {"bucket": {"name": "b"},
            "object": {"key": "ns/t/0/segment-00000000000000000000.kfs", "size": 5, "eTag": "\"abc\""}}},
            {"eventName": "ObjectRemoved:Delete", "s3": {"bucket": {"name": "b"}, "object": {"key": "x"}}}]});
        let EventBody::Created(objects) =
            parse_s3_notification(&body).unwrap_or(EventBody::TestEvent)
        else {
            panic!("expected objects")
        };
        assert_eq!(objects.len(), 1);
        assert_eq!(objects[0].etag.as_deref(), Some("abc"));
        assert_eq!(
            parse_s3_notification(&json!({"Event": "s3:TestEvent"})),
            Ok(EventBody::TestEvent)
        );
        assert!(parse_s3_notification(&json!({"foo": 1})).is_err());
    }
}

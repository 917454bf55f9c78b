//! Schema registries: the schemas registry-encoded record values name by id, behind
//! the narrow [`SchemaRegistry`] trait, with the Confluent REST API (Confluent Schema
//! Registry, Karapace, Apicurio's compatible API, Redpanda) over HTTP
//! ([`HttpRegistry`]) and an in-memory registry for tests ([`MemoryRegistry`]); and the
//! Confluent wire framing of a value ([`confluent_frame`], pure).
//!
//! A schema is fetched once per id and kept for the process ([`SchemaCache`]). An
//! unknown id is not an error of the registry (its records are dead letters); a
//! registry that cannot answer (a timeout, 5xx, throttling) is transient; a refused
//! credential is for the operator.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::fault::ErrorKind;

/// Magic byte of Confluent's framing.
pub const CONFLUENT_MAGIC: u8 = 0;

/// Splits a Confluent-framed value (magic byte 0, a 4-byte big-endian schema id, the
/// payload) into its schema id and payload.
pub fn confluent_frame(value: &[u8]) -> Result<(u32, &[u8]), String> {
    match value {
        [CONFLUENT_MAGIC, a, b, c, d, payload @ ..] => {
            Ok((u32::from_be_bytes([*a, *b, *c, *d]), payload))
        }
        [CONFLUENT_MAGIC, ..] => Err(format!(
            "value of {} bytes is too short for the schema registry's framing (magic byte and 4-byte schema id)",
            value.len()
        )),
        [other, ..] => Err(format!(
            "value does not start with the schema registry's magic byte 0 (found {other:#04x} at byte 0)"
        )),
        [] => Err("value is empty: no schema registry framing".into()),
    }
}

/// The kind of schema a registry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaKind {
    /// Apache Avro (the registries' default).
    Avro,
    /// Protocol Buffers.
    Protobuf,
    /// JSON Schema.
    Json,
}

impl SchemaKind {
    /// The registry's name of the kind (`schemaType`; absent means Avro).
    pub fn parse(text: Option<&str>) -> Result<Self, String> {
        match text.map(str::to_ascii_uppercase).as_deref() {
            None | Some("AVRO") => Ok(Self::Avro),
            Some("PROTOBUF") => Ok(Self::Protobuf),
            Some("JSON") => Ok(Self::Json),
            Some(other) => Err(format!("schema type {other:?} is not known")),
        }
    }
}

/// A schema as the registry holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredSchema {
    /// Its kind.
    pub kind: SchemaKind,
    /// Its text.
    pub text: String,
    /// The schemas it references, transitively, by the name it uses for each (a
    /// Protobuf import path, an Avro named type's subject), with their texts.
    pub references: Vec<(String, String)>,
}

impl RegisteredSchema {
    /// A schema of `kind` that references no other.
    pub fn new(kind: SchemaKind, text: impl Into<String>) -> Self {
        Self {
            kind,
            text: text.into(),
            references: Vec::new(),
        }
    }
}

/// The registry could not answer.
#[derive(Debug, Clone, thiserror::Error)]
#[error("schema registry {location}: {message}")]
pub struct RegistryError {
    /// The request (the registry's URL, credentials never included).
    pub location: String,
    /// What happened.
    pub message: String,
    /// What it means: transient (retried) or for the operator.
    pub kind: ErrorKind,
}

/// Where schemas are looked up by id.
#[async_trait::async_trait]
pub trait SchemaRegistry: Send + Sync + std::fmt::Debug {
    /// The schema `id`, or `None` when the registry has no such id.
    async fn schema(&self, id: u32) -> Result<Option<RegisteredSchema>, RegistryError>;
}

/// Schemas held in memory (tests, fault injection).
#[derive(Debug, Default)]
pub struct MemoryRegistry {
    schemas: Mutex<HashMap<u32, RegisteredSchema>>,
}

impl MemoryRegistry {
    /// Registers `schema` as `id`.
    pub fn register(&self, id: u32, schema: RegisteredSchema) {
        if let Ok(mut schemas) = self.schemas.lock() {
            schemas.insert(id, schema);
        }
    }
}

#[async_trait::async_trait]
impl SchemaRegistry for MemoryRegistry {
    async fn schema(&self, id: u32) -> Result<Option<RegisteredSchema>, RegistryError> {
        self.schemas
            .lock()
            .map(|schemas| schemas.get(&id).cloned())
            .map_err(|_| RegistryError {
                location: "memory".into(),
                message: "the registry's lock is poisoned".into(),
                kind: ErrorKind::Transient,
            })
    }
}

/// How requests to the registry authenticate.
#[derive(Clone, Default, PartialEq, Eq, serde::Deserialize)]
pub struct RegistryCredentials {
    /// Basic authentication's user (Confluent Cloud: the API key).
    #[serde(default)]
    pub username: Option<String>,
    /// Basic authentication's password (Confluent Cloud: the API secret).
    #[serde(default)]
    pub password: Option<String>,
    /// A bearer token.
    #[serde(default)]
    pub token: Option<String>,
}

impl std::fmt::Debug for RegistryCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryCredentials")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<hidden>"))
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .finish()
    }
}

impl RegistryCredentials {
    /// Reads credentials from a JSON file: `{"username", "password"}` or `{"token"}`.
    pub fn from_file(path: &std::path::Path) -> Result<Self, String> {
        let origin = format!("schema registry credentials {}", path.display());
        let text = std::fs::read_to_string(path).map_err(|e| format!("{origin}: {e}"))?;
        Self::from_json(&text, &origin)
    }

    /// Parses credentials from a JSON document (a file's, a secret's) that `origin`
    /// names in errors; the document itself is never quoted.
    pub fn from_json(text: &str, origin: &str) -> Result<Self, String> {
        let credentials: Self = serde_json::from_str(text).map_err(|e| {
            format!(
                "{origin}: expected {{\"username\", \"password\"}} or {{\"token\"}} (line {}, column {})",
                e.line(),
                e.column()
            )
        })?;
        if credentials.token.is_none() && credentials.username.is_none() {
            return Err(format!("{origin}: holds neither a username nor a token"));
        }
        Ok(credentials)
    }
}

/// A registry speaking the Confluent REST API: `GET {url}/schemas/ids/{id}`.
#[derive(Debug, Clone)]
pub struct HttpRegistry {
    client: reqwest::Client,
    url: String,
    credentials: RegistryCredentials,
}

/// The body of `GET /schemas/ids/{id}` and `GET /subjects/{subject}/versions/{v}`.
#[derive(serde::Deserialize)]
struct SchemaBody {
    schema: String,
    #[serde(rename = "schemaType", default)]
    schema_type: Option<String>,
    #[serde(default)]
    references: Vec<ReferenceBody>,
}

/// A reference of a registered schema to another: the name the schema uses for it,
/// and the subject version holding it.
#[derive(serde::Deserialize)]
struct ReferenceBody {
    name: String,
    subject: String,
    version: i64,
}

/// Most schemas one schema may reference, transitively (a cycle of references must
/// end).
const MAX_REFERENCES: usize = 64;

impl HttpRegistry {
    /// The registry at `url` (`https://…`), authenticating with `credentials`.
    pub fn new(url: &str, credentials: RegistryCredentials) -> Result<Self, String> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!(
                "schema registry URL {url:?}: expected http:// or https://"
            ));
        }
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .map_err(|e| format!("schema registry client: {e}"))?;
        Ok(Self {
            client,
            url: url.trim_end_matches('/').to_owned(),
            credentials,
        })
    }
}

impl HttpRegistry {
    /// `GET {url}{path}`: the schema body, `None` when the registry has none there.
    async fn get(&self, path: &str) -> Result<Option<SchemaBody>, RegistryError> {
        let location = format!("{}{path}", self.url);
        let error = |message: String, kind: ErrorKind| RegistryError {
            location: location.clone(),
            message,
            kind,
        };
        let mut request = self
            .client
            .get(&location)
            .header("Accept", "application/vnd.schemaregistry.v1+json");
        let credentials = &self.credentials;
        if let Some(token) = &credentials.token {
            request = request.bearer_auth(token);
        } else if let Some(user) = &credentials.username {
            request = request.basic_auth(user, credentials.password.as_deref());
        }
        // Every failure to get an answer (connection, timeout, a body cut short) may
        // pass: it is transient.
        let response = request
            .send()
            .await
            .map_err(|e| error(e.without_url().to_string(), ErrorKind::Transient))?;
        let status = response.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(error(
                format!("answered {status}"),
                ErrorKind::of_http_status(status.as_u16()),
            ));
        }
        let body: SchemaBody = response.json().await.map_err(|e| {
            let kind = if e.is_decode() {
                ErrorKind::Config
            } else {
                ErrorKind::Transient
            };
            error(format!("its answer: {}", e.without_url()), kind)
        })?;
        Ok(Some(body))
    }
}

/// A subject name as one segment of a URL path.
fn path_segment(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

#[async_trait::async_trait]
impl SchemaRegistry for HttpRegistry {
    async fn schema(&self, id: u32) -> Result<Option<RegisteredSchema>, RegistryError> {
        let Some(body) = self.get(&format!("/schemas/ids/{id}")).await? else {
            return Ok(None);
        };
        let config = |message: String| RegistryError {
            location: format!("{}/schemas/ids/{id}", self.url),
            message,
            kind: ErrorKind::Config,
        };
        let kind = SchemaKind::parse(body.schema_type.as_deref()).map_err(config)?;
        // The referenced schemas, transitively, each once, those a schema references
        // before it (the order Avro's named types need).
        let mut references: Vec<(String, String)> = Vec::new();
        let mut pending: Vec<ReferenceBody> = body.references;
        let mut seen = std::collections::HashSet::new();
        while let Some(reference) = pending.pop() {
            if !seen.insert(reference.name.clone()) {
                continue;
            }
            if seen.len() > MAX_REFERENCES {
                return Err(config(format!(
                    "schema id {id} references more than {MAX_REFERENCES} schemas"
                )));
            }
            let path = format!(
                "/subjects/{}/versions/{}",
                path_segment(&reference.subject),
                reference.version
            );
            let Some(found) = self.get(&path).await? else {
                // Its records are dead letters: the schema cannot be read.
                return Ok(Some(RegisteredSchema {
                    kind,
                    text: body.schema,
                    references: vec![(
                        reference.name,
                        format!(
                            "<subject {} version {} is not in the schema registry>",
                            reference.subject, reference.version
                        ),
                    )],
                }));
            };
            references.insert(0, (reference.name, found.schema));
            pending.extend(found.references);
        }
        Ok(Some(RegisteredSchema {
            kind,
            text: body.schema,
            references,
        }))
    }
}

/// A schema cache in front of the registry at `url`, authenticating with
/// `credentials`: what the command line and the functions build once.
pub fn registry_cache<T>(
    url: &str,
    credentials: RegistryCredentials,
) -> Result<SchemaCache<T>, String> {
    Ok(SchemaCache::new(Arc::new(HttpRegistry::new(
        url,
        credentials,
    )?)))
}

/// What a schema id resolved to, parsed: `Err` holds why its records cannot be read
/// (an unknown id, a schema that does not parse or has no table form).
pub type Resolved<T> = Result<Arc<T>, String>;

/// Schemas by id, fetched once and parsed once for the process.
#[derive(Debug)]
pub struct SchemaCache<T> {
    registry: Arc<dyn SchemaRegistry>,
    parsed: Mutex<HashMap<u32, Resolved<T>>>,
}

impl<T> SchemaCache<T> {
    /// A cache in front of `registry`.
    pub fn new(registry: Arc<dyn SchemaRegistry>) -> Self {
        Self {
            registry,
            parsed: Mutex::new(HashMap::new()),
        }
    }

    /// Schema `id`, parsed by `parse`; fetched from the registry the first time.
    pub async fn get(
        &self,
        id: u32,
        parse: impl FnOnce(RegisteredSchema) -> Result<T, String>,
    ) -> Result<Resolved<T>, RegistryError> {
        if let Some(found) = self.parsed.lock().ok().and_then(|p| p.get(&id).cloned()) {
            return Ok(found);
        }
        let resolved = match self.registry.schema(id).await? {
            Some(schema) => parse(schema).map(Arc::new),
            None => Err(format!("schema id {id} is not in the schema registry")),
        };
        if let Ok(mut parsed) = self.parsed.lock() {
            parsed.insert(id, resolved.clone());
        }
        Ok(resolved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_split_or_refused_with_the_reason() {
        assert_eq!(
            confluent_frame(&[0, 0, 0, 1, 2, 9, 9]),
            Ok((258, &[9u8, 9][..]))
        );
        assert_eq!(confluent_frame(&[0, 0, 0, 0, 7]), Ok((7, &[][..])));
        assert!(confluent_frame(&[0, 0, 1]).is_err_and(|e| e.contains("too short")));
        assert!(confluent_frame(b"{}").is_err_and(|e| e.contains("magic byte")));
        assert!(confluent_frame(b"").is_err());
    }

    #[test]
    fn credentials_parse_without_quoting_the_document() {
        let parsed =
            RegistryCredentials::from_json(r#"{"username": "key", "password": "pw"}"#, "file");
        assert!(parsed.is_ok_and(|c| c.username.as_deref() == Some("key")));
        for refused in [
            r#"password=s3cret"#,
            r#"{"password": "s3cret"}"#,
            r#"{"user": "s3cret"}"#,
        ] {
            let error = RegistryCredentials::from_json(refused, "secret x")
                .err()
                .unwrap_or_default();
            assert!(
                error.starts_with("secret x") && !error.contains("s3cret"),
                "{error}"
            );
        }
    }

    #[test]
    fn credentials_never_print() {
        let credentials = RegistryCredentials {
            username: Some("key".into()),
            password: Some("s3cret".into()),
            token: Some("t0ken".into()),
        };
        let printed = format!("{credentials:?}");
        assert!(
            !printed.contains("s3cret") && !printed.contains("t0ken"),
            "{printed}"
        );
    }

    #[tokio::test]
    async fn a_schema_is_fetched_once() -> Result<(), RegistryError> {
        let registry = Arc::new(MemoryRegistry::default());
        registry.register(1, RegisteredSchema::new(SchemaKind::Avro, "\"long\""));
        let cache: SchemaCache<usize> = SchemaCache::new(registry.clone());
        let first = cache.get(1, |s| Ok(s.text.len())).await?.map(|n| *n);
        registry.register(1, RegisteredSchema::new(SchemaKind::Avro, "changed"));
        let again = cache.get(1, |s| Ok(s.text.len())).await?.map(|n| *n);
        assert_eq!((first, again), (Ok(6), Ok(6)));
        let unknown = cache.get(2, |s| Ok(s.text.len())).await?;
        assert!(unknown.is_err_and(|e| e.contains("not in the schema registry")));
        Ok(())
    }
}

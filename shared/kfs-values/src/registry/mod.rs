//! Schema registries: the schemas registry-encoded record values name by id, behind
//! the narrow [`SchemaRegistry`] trait, with the Confluent REST API (Confluent Schema
//! Registry, Karapace, Apicurio's compatible API, Redpanda) over HTTP
//! ([`HttpRegistry`]) and an in-memory registry for tests ([`MemoryRegistry`]); and the
//! wire framing of a value, Confluent's or the AWS Glue Schema Registry's ([`frame`],
//! pure). The AWS Glue Schema Registry itself is at the edge (`kfs-aws`).
//!
//! Schemas are looked up with a budget and kept (`SchemaCache`, in
//! `cache`). An unknown id is not an error of the registry (its records are
//! dead letters once the registry keeps saying so); a registry that cannot answer (a
//! timeout, 5xx, throttling) is transient; a refused credential is for the operator.

mod cache;

pub use cache::{LookupPolicy, SchemaCache, open_registry};

use std::collections::HashMap;
use std::sync::Mutex;

use kfs_plan::fault::ErrorKind;
use kfs_plan::secret_url::SecretUrl;

/// Magic byte of Confluent's framing.
pub const CONFLUENT_MAGIC: u8 = 0;

/// Header version byte of the AWS Glue Schema Registry's framing.
pub const GLUE_HEADER_VERSION: u8 = 3;

/// Largest payload a zlib-compressed Glue value may inflate to: the inflated bytes one
/// registry conversion holds at once, in the few copies its pipeline keeps of one
/// value (the inflated payload, the decoded value, its cell, its Arrow column and
/// Parquet page), which the converter's memory budget admits a registry conversion
/// for (`converter::REGISTRY_VALUE_MIB`). A batch is flushed after a value this large
/// (its bytes count four times), so the copies of no two such values add up; a value
/// inflating beyond is a dead letter with the reason.
pub const MAX_INFLATED_PAYLOAD: u64 = 16 << 20;

/// The schema a value's framing names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SchemaId {
    /// A schema id of a Confluent-compatible registry.
    Confluent(u32),
    /// A schema version id of the AWS Glue Schema Registry.
    Glue(uuid::Uuid),
}

impl std::fmt::Display for SchemaId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Confluent(id) => write!(f, "id {id}"),
            Self::Glue(version) => write!(f, "version {version} (AWS Glue)"),
        }
    }
}

/// A value split by its framing: the schema it names and its payload.
#[derive(Debug, PartialEq, Eq)]
pub struct Framed<'v> {
    /// The writer schema.
    pub id: SchemaId,
    /// The payload, inflated when it was compressed.
    pub payload: std::borrow::Cow<'v, [u8]>,
}

/// Splits a registry-framed value into its schema and payload:
/// - Confluent's framing: magic byte 0, a 4-byte big-endian schema id, the payload;
/// - the AWS Glue Schema Registry's: header version 3, a compression byte (0 none,
///   5 zlib), the 16-byte schema version id, the payload.
pub fn frame(value: &[u8]) -> Result<Framed<'_>, String> {
    framed_up_to(value, None)
}

/// [`frame`] with at most `bytes` of a compressed payload inflated: what a scan of a
/// segment reads of a value (its schema, and the message it names), not the whole.
pub fn frame_head(value: &[u8], bytes: u64) -> Result<Framed<'_>, String> {
    framed_up_to(value, Some(bytes))
}

fn framed_up_to(value: &[u8], head: Option<u64>) -> Result<Framed<'_>, String> {
    let short = |what: &str| format!("value of {} bytes is too short for {what}", value.len());
    match value {
        [CONFLUENT_MAGIC, a, b, c, d, payload @ ..] => Ok(Framed {
            id: SchemaId::Confluent(u32::from_be_bytes([*a, *b, *c, *d])),
            payload: std::borrow::Cow::Borrowed(payload),
        }),
        [CONFLUENT_MAGIC, ..] => Err(short(
            "the schema registry's framing (magic byte and 4-byte schema id)",
        )),
        [GLUE_HEADER_VERSION, compression, rest @ ..] if rest.len() >= 16 => {
            let (version, payload) = rest.split_at(16);
            let id = SchemaId::Glue(uuid::Uuid::from_slice(version).map_err(|e| e.to_string())?);
            let payload = match compression {
                0 => std::borrow::Cow::Borrowed(payload),
                5 => std::borrow::Cow::Owned(inflate(payload, head)?),
                other => {
                    return Err(format!(
                        "AWS Glue framing names compression {other} at byte 1 (0 none or 5 zlib)"
                    ));
                }
            };
            Ok(Framed { id, payload })
        }
        [GLUE_HEADER_VERSION, ..] => Err(short(
            "AWS Glue's framing (header version, compression and 16-byte schema version id)",
        )),
        [other, ..] => Err(format!(
            "value does not start with the schema registry's magic byte 0 or AWS Glue's header version 3 (found {other:#04x} at byte 0)"
        )),
        [] => Err("value is empty: no schema registry framing".into()),
    }
}

/// Inflates a zlib payload of a Glue value, at most [`MAX_INFLATED_PAYLOAD`] bytes
/// (only its first `head` bytes, when given), into a buffer that never grows beyond
/// the bound (a doubling buffer would take twice it).
fn inflate(compressed: &[u8], head: Option<u64>) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let limit = head.unwrap_or(MAX_INFLATED_PAYLOAD + 1);
    let cap = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut decoder = flate2::read::ZlibDecoder::new(compressed).take(limit);
    let mut inflated: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    loop {
        let n = decoder.read(&mut chunk).map_err(|e| {
            format!("zlib payload of the AWS Glue framing does not inflate (from byte 18): {e}")
        })?;
        if n == 0 {
            break;
        }
        if inflated.len() + n > inflated.capacity() {
            let wanted = (inflated.capacity().saturating_mul(2).max(4096))
                .min(cap)
                .max(inflated.len() + n);
            inflated.reserve_exact(wanted - inflated.len());
        }
        inflated.extend_from_slice(&chunk[..n]);
    }
    if inflated.len() as u64 > MAX_INFLATED_PAYLOAD {
        return Err(format!(
            "zlib payload of the AWS Glue framing inflates past {MAX_INFLATED_PAYLOAD} bytes"
        ));
    }
    Ok(inflated)
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
    /// The request (the registry's URL, redacted: credentials never included).
    pub location: String,
    /// What happened.
    pub message: String,
    /// What it means: transient (retried) or for the operator.
    pub kind: ErrorKind,
}

/// Where schemas are looked up by id.
#[async_trait::async_trait]
pub trait SchemaRegistry: Send + Sync + std::fmt::Debug {
    /// The schema `id`, or `None` when the registry has no such schema (a Confluent
    /// registry holds no Glue schema versions, and the other way round).
    async fn schema(&self, id: SchemaId) -> Result<Option<RegisteredSchema>, RegistryError>;

    /// Schema `id`, or why the registry has none (not found: an answer a lagging
    /// replica may give for a moment, so it is asked again before the id's records
    /// are dead letters).
    async fn lookup(
        &self,
        id: SchemaId,
    ) -> Result<Result<RegisteredSchema, String>, RegistryError> {
        Ok(self
            .schema(id)
            .await?
            .ok_or_else(|| format!("schema {id} is not in the schema registry")))
    }
}

/// Schemas held in memory (tests, fault injection).
#[derive(Debug, Default)]
pub struct MemoryRegistry {
    schemas: Mutex<HashMap<SchemaId, RegisteredSchema>>,
}

impl MemoryRegistry {
    /// Registers `schema` as `id`.
    pub fn register(&self, id: SchemaId, schema: RegisteredSchema) {
        if let Ok(mut schemas) = self.schemas.lock() {
            schemas.insert(id, schema);
        }
    }
}

#[async_trait::async_trait]
impl SchemaRegistry for MemoryRegistry {
    async fn schema(&self, id: SchemaId) -> Result<Option<RegisteredSchema>, RegistryError> {
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
    /// The base URL, which may carry a user and password (sent as basic
    /// authentication, never printed).
    url: SecretUrl,
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
    pub fn new(url: &SecretUrl, credentials: RegistryCredentials) -> Result<Self, String> {
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
            url: SecretUrl::from(url.expose().trim_end_matches('/')),
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
            .get(format!("{}{path}", self.url.expose()))
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
    async fn schema(&self, id: SchemaId) -> Result<Option<RegisteredSchema>, RegistryError> {
        Ok(self.lookup(id).await?.ok())
    }

    async fn lookup(
        &self,
        schema_id: SchemaId,
    ) -> Result<Result<RegisteredSchema, String>, RegistryError> {
        let missing = || {
            Ok(Err(format!(
                "schema {schema_id} is not in the schema registry"
            )))
        };
        let SchemaId::Confluent(id) = schema_id else {
            return missing();
        };
        let Some(body) = self.get(&format!("/schemas/ids/{id}")).await? else {
            return missing();
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
                // Not found, like an id: asked again before its records are dead
                // letters (a lagging replica may not hold the reference yet).
                return Ok(Err(format!(
                    "schema {schema_id} references subject {} version {}, which is not in the schema registry",
                    reference.subject, reference.version
                )));
            };
            references.insert(0, (reference.name, found.schema));
            pending.extend(found.references);
        }
        Ok(Ok(RegisteredSchema {
            kind,
            text: body.schema,
            references,
        }))
    }
}

/// Where writer schemas are looked up (`--schema-registry-url`, `SCHEMA_REGISTRY_URL`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryLocation {
    /// A registry speaking the Confluent REST API (`http://…`, `https://…`).
    Confluent {
        /// Its base URL (a user and password in it are sent as basic authentication).
        url: SecretUrl,
        /// How requests authenticate.
        credentials: RegistryCredentials,
    },
    /// The AWS Glue Schema Registry (`glue://`, or `glue://REGION`), read with the
    /// process's AWS credentials: opened at the AWS edge (`kfs-aws`).
    Glue {
        /// Its region; `None`: the process's.
        region: Option<String>,
    },
}

impl RegistryLocation {
    /// The registry `url` names, authenticating with `credentials` (which the Glue
    /// registry, using AWS credentials, refuses).
    pub fn parse(url: &SecretUrl, credentials: RegistryCredentials) -> Result<Self, String> {
        if let Some(region) = url.expose().strip_prefix("glue://") {
            if credentials != RegistryCredentials::default() {
                return Err(format!(
                    "schema registry {url:?} is AWS Glue's, which authenticates with the AWS credentials: it takes no registry credentials"
                ));
            }
            let region = region.trim_end_matches('/');
            if !region
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            {
                return Err(format!(
                    "schema registry URL {url:?}: expected glue:// or glue://REGION"
                ));
            }
            return Ok(Self::Glue {
                region: (!region.is_empty()).then(|| region.to_owned()),
            });
        }
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!(
                "schema registry URL {url:?}: expected http://, https:// (a Confluent-compatible registry) or glue:// (AWS Glue)"
            ));
        }
        Ok(Self::Confluent {
            url: url.clone(),
            credentials,
        })
    }
}

#[cfg(test)]
mod tests;

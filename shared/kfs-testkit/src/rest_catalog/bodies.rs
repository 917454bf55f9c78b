//! Request and response bodies of the REST API.

use super::*;

#[derive(Serialize, Deserialize)]
pub(super) struct Ident {
    pub(super) namespace: Vec<String>,
    pub(super) name: String,
}

#[derive(Serialize, Deserialize)]
pub(super) struct NamespaceBody {
    pub(super) namespace: Vec<String>,
    #[serde(default)]
    pub(super) properties: Option<HashMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) struct CreateTableReq {
    pub(super) name: String,
    pub(super) location: Option<String>,
    pub(super) schema: Schema,
    pub(super) partition_spec: Option<UnboundPartitionSpec>,
    pub(super) write_order: Option<SortOrder>,
    pub(super) stage_create: Option<bool>,
    pub(super) properties: Option<HashMap<String, String>>,
}

#[derive(Deserialize)]
pub(super) struct CommitReq {
    pub(super) identifier: Option<Ident>,
    #[serde(default)]
    pub(super) requirements: Vec<TableRequirement>,
    #[serde(default)]
    pub(super) updates: Vec<TableUpdate>,
}

#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
pub(super) struct TableResp<'a> {
    pub(super) metadata_location: Option<&'a str>,
    pub(super) metadata: &'a TableMetadata,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) config: Option<HashMap<String, String>>,
}

pub(super) fn load_result(location: Option<&str>, metadata: &TableMetadata) -> Response {
    Json(TableResp {
        metadata_location: location,
        metadata,
        config: Some(HashMap::new()),
    })
    .into_response()
}

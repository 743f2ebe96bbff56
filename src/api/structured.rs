//! Wire types of structured outputs: OpenAI's `response_format` and vLLM's
//! `structured_outputs` (with its older `guided_*` names, which live in `CommonParams`).

use serde::Deserialize;
use utoipa::ToSchema;

/// `response_format.json_schema`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct JsonSchemaFormat {
    /// A name for the schema.
    pub name: Option<String>,
    /// What the schema is for.
    pub description: Option<String>,
    /// The JSON Schema the output must satisfy.
    #[schema(value_type = Object)]
    pub schema: Option<serde_json::Value>,
    /// OpenAI's strict mode; the output is always held to the schema here.
    pub strict: Option<bool>,
}

/// OpenAI's `response_format`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    /// Free text (the default).
    Text,
    /// Any JSON object.
    JsonObject,
    /// JSON valid against the given schema.
    JsonSchema {
        /// The schema and its name.
        json_schema: JsonSchemaFormat,
    },
}

/// vLLM's `structured_outputs`: exactly one of the fields.
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
pub struct StructuredOutputs {
    /// A JSON Schema (an object, or a string holding one).
    #[schema(value_type = Object)]
    pub json: Option<serde_json::Value>,
    /// A regular expression the whole output matches.
    pub regex: Option<String>,
    /// The output is exactly one of these strings.
    pub choice: Option<Vec<String>>,
    /// A Lark grammar (llguidance's dialect).
    pub grammar: Option<String>,
    /// Any JSON object.
    pub json_object: Option<bool>,
}

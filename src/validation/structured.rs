//! Structured-output fields to one compiled grammar: at most one of `response_format`
//! (json_object / json_schema), `structured_outputs` and the `guided_*` fields, compiled
//! here so a bad schema, regex or grammar is a 400 naming the field.

use serde_json::Value;
use sluice_engine::{Constraint, GrammarSpec, Grammars};

use super::{Fields, ValidationError};
use crate::api::CommonParams;
use crate::api::structured::ResponseFormat;

/// A field that asks for a constraint: its chat name (in messages) and the name the
/// client's API gives it (the refusal's `param`).
#[derive(Clone, Copy)]
struct Field {
    name: &'static str,
    param: &'static str,
}

impl Field {
    fn plain(name: &'static str) -> Self {
        Self { name, param: name }
    }

    fn invalid(self, message: impl Into<String>) -> ValidationError {
        ValidationError::invalid(self.param, message)
    }
}

/// A JSON Schema given as an object, or as a string holding one.
fn schema(f: Field, v: &Value) -> Result<Value, ValidationError> {
    let name = f.name;
    let v = match v {
        Value::String(s) => {
            serde_json::from_str(s).map_err(|e| f.invalid(format!("`{name}` is not JSON: {e}")))?
        }
        other => other.clone(),
    };
    match v {
        Value::Object(_) | Value::Bool(_) => Ok(v),
        _ => Err(f.invalid(format!("`{name}` must be a JSON Schema object"))),
    }
}

/// Every constraint the request sets, with the field that set it.
fn specs(c: &CommonParams, fields: &Fields) -> Result<Vec<(Field, GrammarSpec)>, ValidationError> {
    let mut out = Vec::new();
    let rf = Field {
        name: "response_format",
        param: fields.response_format,
    };
    match &c.response_format {
        None | Some(ResponseFormat::Text) => {}
        Some(ResponseFormat::JsonObject) => out.push((rf, GrammarSpec::JsonObject)),
        Some(ResponseFormat::JsonSchema { json_schema }) => {
            let s = json_schema
                .schema
                .as_ref()
                .ok_or_else(|| rf.invalid("`response_format.json_schema.schema` is required"))?;
            out.push((rf, GrammarSpec::JsonSchema(schema(rf, s)?)));
        }
    }
    if let Some(so) = &c.structured_outputs {
        let p = Field::plain("structured_outputs");
        if let Some(j) = &so.json {
            out.push((p, GrammarSpec::JsonSchema(schema(p, j)?)));
        }
        if let Some(r) = &so.regex {
            out.push((p, GrammarSpec::Regex(r.clone())));
        }
        if let Some(ch) = &so.choice {
            out.push((p, choice(p, ch)?));
        }
        if let Some(g) = &so.grammar {
            out.push((p, GrammarSpec::Lark(g.clone())));
        }
        if so.json_object == Some(true) {
            out.push((p, GrammarSpec::JsonObject));
        }
    }
    if let Some(j) = &c.guided_json {
        let p = Field::plain("guided_json");
        out.push((p, GrammarSpec::JsonSchema(schema(p, j)?)));
    }
    if let Some(r) = &c.guided_regex {
        out.push((Field::plain("guided_regex"), GrammarSpec::Regex(r.clone())));
    }
    if let Some(ch) = &c.guided_choice {
        let p = Field::plain("guided_choice");
        out.push((p, choice(p, ch)?));
    }
    if let Some(g) = &c.guided_grammar {
        out.push((Field::plain("guided_grammar"), GrammarSpec::Lark(g.clone())));
    }
    Ok(out)
}

fn choice(f: Field, ch: &[String]) -> Result<GrammarSpec, ValidationError> {
    if ch.is_empty() || ch.iter().any(String::is_empty) {
        let name = f.name;
        return Err(f.invalid(format!("`{name}` must list at least one non-empty string")));
    }
    Ok(GrammarSpec::Choice(ch.to_vec()))
}

/// The request's compiled grammar, if it asks for one.
pub(super) fn constraint(
    c: &CommonParams,
    grammars: Option<&Grammars>,
    fields: &Fields,
) -> Result<Option<Constraint>, ValidationError> {
    let mut all = specs(c, fields)?;
    if all.len() > 1 {
        let names: Vec<&str> = all.iter().map(|(f, _)| f.name).collect();
        return Err(all[1].0.invalid(format!(
            "give one output constraint, not several ({})",
            names.join(", ")
        )));
    }
    let Some((f, spec)) = all.pop() else {
        return Ok(None);
    };
    let g = grammars.ok_or_else(|| {
        f.invalid("structured outputs are not available for this model's tokenizer")
    })?;
    g.compile(&spec)
        .map(Some)
        .map_err(|e| f.invalid(format!("invalid `{}`: {e}", f.name)))
}

/// The field that asks for an output constraint, if any: its chat name and the client's.
pub(super) fn field(
    c: &CommonParams,
    fields: &Fields,
) -> Result<Option<(&'static str, &'static str)>, ValidationError> {
    Ok(specs(c, fields)?.first().map(|(f, _)| (f.name, f.param)))
}

/// Fields a grammar cannot honour: it ends the answer itself, with an end token.
pub(super) fn compatible(c: &CommonParams, constrained: bool) -> Result<(), ValidationError> {
    if !constrained {
        return Ok(());
    }
    if c.ignore_eos {
        return Err(ValidationError::invalid(
            "ignore_eos",
            "`ignore_eos` cannot be combined with an output constraint: a finished grammar \
             allows only the end token",
        ));
    }
    if c.min_tokens.is_some_and(|m| m > 0) {
        return Err(ValidationError::invalid(
            "min_tokens",
            "`min_tokens` cannot be combined with an output constraint: the grammar decides \
             where the answer ends",
        ));
    }
    Ok(())
}

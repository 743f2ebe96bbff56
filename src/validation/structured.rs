//! Structured-output fields to one compiled grammar: at most one of `response_format`
//! (json_object / json_schema), `structured_outputs` and the `guided_*` fields, compiled
//! here so a bad schema, regex or grammar is a 400 naming the field.

use serde_json::Value;
use sluice_engine::{Constraint, GrammarSpec, Grammars};

use super::ValidationError;
use crate::api::CommonParams;
use crate::api::structured::ResponseFormat;

/// A JSON Schema given as an object, or as a string holding one.
fn schema(param: &'static str, v: &Value) -> Result<Value, ValidationError> {
    let v = match v {
        Value::String(s) => serde_json::from_str(s)
            .map_err(|e| ValidationError::invalid(param, format!("`{param}` is not JSON: {e}")))?,
        other => other.clone(),
    };
    match v {
        Value::Object(_) | Value::Bool(_) => Ok(v),
        _ => Err(ValidationError::invalid(
            param,
            format!("`{param}` must be a JSON Schema object"),
        )),
    }
}

/// Every constraint the request sets, with the field that set it.
fn specs(c: &CommonParams) -> Result<Vec<(&'static str, GrammarSpec)>, ValidationError> {
    let mut out = Vec::new();
    match &c.response_format {
        None | Some(ResponseFormat::Text) => {}
        Some(ResponseFormat::JsonObject) => out.push(("response_format", GrammarSpec::JsonObject)),
        Some(ResponseFormat::JsonSchema { json_schema }) => {
            let s = json_schema.schema.as_ref().ok_or_else(|| {
                ValidationError::invalid(
                    "response_format",
                    "`response_format.json_schema.schema` is required",
                )
            })?;
            let s = schema("response_format", s)?;
            out.push(("response_format", GrammarSpec::JsonSchema(s)));
        }
    }
    if let Some(so) = &c.structured_outputs {
        const P: &str = "structured_outputs";
        if let Some(j) = &so.json {
            out.push((P, GrammarSpec::JsonSchema(schema(P, j)?)));
        }
        if let Some(r) = &so.regex {
            out.push((P, GrammarSpec::Regex(r.clone())));
        }
        if let Some(ch) = &so.choice {
            out.push((P, choice(P, ch)?));
        }
        if let Some(g) = &so.grammar {
            out.push((P, GrammarSpec::Lark(g.clone())));
        }
        if so.json_object == Some(true) {
            out.push((P, GrammarSpec::JsonObject));
        }
    }
    if let Some(j) = &c.guided_json {
        out.push((
            "guided_json",
            GrammarSpec::JsonSchema(schema("guided_json", j)?),
        ));
    }
    if let Some(r) = &c.guided_regex {
        out.push(("guided_regex", GrammarSpec::Regex(r.clone())));
    }
    if let Some(ch) = &c.guided_choice {
        out.push(("guided_choice", choice("guided_choice", ch)?));
    }
    if let Some(g) = &c.guided_grammar {
        out.push(("guided_grammar", GrammarSpec::Lark(g.clone())));
    }
    Ok(out)
}

fn choice(param: &'static str, ch: &[String]) -> Result<GrammarSpec, ValidationError> {
    if ch.is_empty() || ch.iter().any(String::is_empty) {
        return Err(ValidationError::invalid(
            param,
            format!("`{param}` must list at least one non-empty string"),
        ));
    }
    Ok(GrammarSpec::Choice(ch.to_vec()))
}

/// The request's compiled grammar, if it asks for one.
pub(super) fn constraint(
    c: &CommonParams,
    grammars: Option<&Grammars>,
) -> Result<Option<Constraint>, ValidationError> {
    let mut all = specs(c)?;
    if all.len() > 1 {
        let names: Vec<&str> = all.iter().map(|(p, _)| *p).collect();
        return Err(ValidationError::invalid(
            all[1].0,
            format!(
                "give one output constraint, not several ({})",
                names.join(", ")
            ),
        ));
    }
    let Some((param, spec)) = all.pop() else {
        return Ok(None);
    };
    let g = grammars.ok_or_else(|| {
        ValidationError::invalid(
            param,
            "structured outputs are not available for this model's tokenizer",
        )
    })?;
    g.compile(&spec)
        .map(Some)
        .map_err(|e| ValidationError::invalid(param, format!("invalid `{param}`: {e}")))
}

/// The field that asks for an output constraint, if any.
pub(super) fn field(c: &CommonParams) -> Result<Option<&'static str>, ValidationError> {
    Ok(specs(c)?.first().map(|(p, _)| *p))
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

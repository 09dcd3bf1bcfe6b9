//! Input schemas as clients see them: generated from the parameter types, with `$ref`s
//! inlined and what only bloats a client's context left out (titles, formats, `null`
//! alternatives of optional fields).

use rmcp::model::JsonObject;
use schemars::JsonSchema;

/// The input schema of `T`, stripped of what only bloats a client's context (titles, formats,
/// `null` alternatives of optional fields).
pub(crate) fn input_schema<T: JsonSchema>() -> JsonObject {
    let generator = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    let mut v = generator.into_root_schema_for::<T>().to_value();
    if let Some(serde_json::Value::Object(defs)) = v.as_object_mut().and_then(|o| o.remove("$defs"))
    {
        inline_refs(&mut v, &defs, 0);
    }
    compact(&mut v);
    match v {
        serde_json::Value::Object(mut o) => {
            o.remove("$schema");
            o.remove("description");
            o
        }
        _ => JsonObject::new(),
    }
}

/// Replaces each `$ref` to a definition by the definition itself (the schemas here are small
/// and not recursive; inlined they read more easily and cost fewer tokens).
fn inline_refs(v: &mut serde_json::Value, defs: &JsonObject, depth: usize) {
    use serde_json::Value;
    match v {
        Value::Object(o) => {
            let target = o
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/$defs/"))
                .and_then(|name| defs.get(name))
                .cloned();
            if let (Some(Value::Object(def)), true) = (target, depth < 8) {
                o.remove("$ref");
                for (k, val) in def {
                    if k != "description" || !o.contains_key("description") {
                        o.entry(k).or_insert(val);
                    }
                }
            }
            for (_, child) in o.iter_mut() {
                inline_refs(child, defs, depth + 1);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|c| inline_refs(c, defs, depth + 1)),
        _ => {}
    }
}

fn compact(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Object(o) => {
            // Schema keywords only: a property that happens to be called `format` is an object.
            for key in [
                "title",
                "format",
                "minimum",
                "maximum",
                "additionalProperties",
            ] {
                if o.get(key).is_some_and(|v| !v.is_object()) {
                    o.remove(key);
                }
            }
            if let Some(Value::Object(defs)) = o.get_mut("$defs") {
                // The property that refers to a definition documents it already.
                for def in defs.values_mut() {
                    if let Value::Object(d) = def {
                        d.remove("description");
                    }
                }
            }
            if let Some(Value::Array(types)) = o.get("type") {
                let non_null: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
                if non_null.len() == 1 {
                    o.insert("type".into(), non_null[0].clone());
                }
            }
            if let Some(Value::Array(any)) = o.get("anyOf") {
                let non_null: Vec<Value> = any
                    .iter()
                    .filter(|s| s.get("type").is_none_or(|t| t != "null"))
                    .cloned()
                    .collect();
                if non_null.len() == 1 {
                    o.remove("anyOf");
                    if let Value::Object(inner) = &non_null[0] {
                        for (k, val) in inner {
                            o.entry(k.clone()).or_insert(val.clone());
                        }
                    }
                }
            }
            // An array's property says what it holds; its items need not say it again.
            if o.contains_key("description")
                && let Some(Value::Object(items)) = o.get_mut("items")
            {
                items.remove("description");
            }
            if o.get("type").is_some_and(|t| t == "object")
                && o.get("properties")
                    .is_some_and(|p| p.as_object().is_some_and(|p| p.is_empty()))
            {
                o.remove("properties");
            }
            for (_, child) in o.iter_mut() {
                compact(child);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(compact),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_keep_required_fields_and_docs() {
        let s = serde_json::Value::Object(input_schema::<super::super::recall::RecallParams>());
        assert_eq!(s["required"], serde_json::json!(["query"]));
        assert!(
            s["properties"]["limit"]["description"]
                .as_str()
                .unwrap()
                .contains("1–100")
        );
        assert_eq!(s["properties"]["limit"]["type"], "integer");
    }
}

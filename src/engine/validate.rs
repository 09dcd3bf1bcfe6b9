//! Checks of caller input, each failing with the field's path, what was wrong and how to fix it.

use crate::config::Limits;
use crate::error::{Error, Result};

/// A namespace, kind or relation kind: 1–`max` bytes of letters, digits, `_ - . : /`.
pub fn label(field: &str, value: &str, max: usize) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(
            field,
            "is empty",
            "give a non-empty value, e.g. \"default\"",
        ));
    }
    if value.len() > max {
        return Err(Error::invalid(
            field,
            format!("is {} bytes long", value.len()),
            format!("use at most {max} bytes"),
        ));
    }
    if let Some(c) = value
        .chars()
        .find(|c| !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '/')))
    {
        return Err(Error::invalid(
            field,
            format!("contains the character {c:?}"),
            "use only letters, digits and _ - . : /",
        ));
    }
    Ok(())
}

/// Content of a memory: not blank, at most the configured size.
pub fn content(field: &str, value: &str, limits: &Limits) -> Result<()> {
    if value.trim().is_empty() {
        return Err(Error::invalid(
            field,
            "is empty",
            "give the text to remember",
        ));
    }
    if value.len() > limits.max_content_bytes {
        return Err(Error::invalid(
            field,
            format!(
                "is {} bytes, over the limit of {}",
                value.len(),
                limits.max_content_bytes
            ),
            "split it into several memories (e.g. by paragraph) and link them with `links`",
        ));
    }
    Ok(())
}

/// A memory name: not blank, no control characters, bounded.
pub fn name(field: &str, value: &str, limits: &Limits) -> Result<()> {
    if value.trim().is_empty() {
        return Err(Error::invalid(
            field,
            "is empty",
            "leave `name` out or give a non-empty one",
        ));
    }
    if value.len() > limits.max_name_bytes {
        return Err(Error::invalid(
            field,
            format!("is {} bytes long", value.len()),
            format!("use at most {} bytes", limits.max_name_bytes),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(Error::invalid(
            field,
            "contains control characters",
            "remove them",
        ));
    }
    Ok(())
}

/// A tag list: bounded count, each tag a non-empty bounded string without control characters.
pub fn tags(field: &str, tags: &[String], limits: &Limits) -> Result<()> {
    if tags.len() > limits.max_tags {
        return Err(Error::invalid(
            field,
            format!("has {} tags", tags.len()),
            format!(
                "give at most {} tags; put longer lists in `metadata`",
                limits.max_tags
            ),
        ));
    }
    for (i, t) in tags.iter().enumerate() {
        let f = format!("{field}[{i}]");
        if t.trim().is_empty() {
            return Err(Error::invalid(f, "is empty", "remove the empty tag"));
        }
        if t.len() > limits.max_tag_bytes || t.chars().any(char::is_control) {
            return Err(Error::invalid(
                f,
                "is too long or contains control characters",
                format!("use at most {} printable bytes", limits.max_tag_bytes),
            ));
        }
    }
    Ok(())
}

/// A number in [0, 1].
pub fn unit(field: &str, value: f64) -> Result<()> {
    if !(0.0..=1.0).contains(&value) {
        return Err(Error::invalid(
            field,
            format!("is {value}"),
            "give a number from 0 to 1",
        ));
    }
    Ok(())
}

/// Metadata: a JSON object of bounded size.
pub fn metadata(field: &str, value: &serde_json::Value, limits: &Limits) -> Result<()> {
    if !value.is_object() {
        return Err(Error::invalid(
            field,
            "is not an object",
            "give a JSON object, e.g. {\"source\": \"chat\"}",
        ));
    }
    let size = value.to_string().len();
    if size > limits.max_metadata_bytes {
        return Err(Error::invalid(
            field,
            format!("is {size} bytes"),
            format!("keep it under {} bytes", limits.max_metadata_bytes),
        ));
    }
    Ok(())
}

/// A batch size: 1..=max.
pub fn batch(field: &str, n: usize, limits: &Limits) -> Result<()> {
    if n == 0 {
        return Err(Error::invalid(field, "is empty", "give at least one item"));
    }
    if n > limits.max_batch {
        return Err(Error::invalid(
            field,
            format!("has {n} items"),
            format!(
                "send at most {} per call, or use `import` for bulk loads",
                limits.max_batch
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert!(label("namespace", "project:alpha/v1", 200).is_ok());
        let e = label("namespace", "bad name", 200).unwrap_err().to_string();
        assert!(e.contains("`namespace`") && e.contains("' '"), "{e}");
        assert!(label("namespace", "", 200).is_err());
        assert!(label("namespace", &"a".repeat(201), 200).is_err());
    }

    #[test]
    fn content_limits() {
        let limits = Limits::default();
        assert!(content("c", "hi", &limits).is_ok());
        assert!(content("c", "  ", &limits).is_err());
        let e = content("memories[0].content", &"x".repeat(70_000), &limits).unwrap_err();
        assert!(e.to_string().contains("memories[0].content"));
    }

    #[test]
    fn tag_lists() {
        let limits = Limits::default();
        let many: Vec<String> = (0..40).map(|i| i.to_string()).collect();
        assert!(tags("tags", &many, &limits).is_err());
        assert!(tags("tags", &["ok".into(), "".into()], &limits).is_err());
        assert!(tags("tags", &["ok".into()], &limits).is_ok());
    }
}

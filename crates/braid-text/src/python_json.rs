//! JSON as Python's `json.dumps` writes it, which is how Hugging Face chat templates render
//! tools and tool calls (`tojson`), and so how a model saw them in training.

use serde::Serialize;
use serde_json::Value;

/// JSON as Python's `json.dumps` writes it (`", "` and `": "`), as Hugging Face templates
/// render tools and calls with `tojson`, and as the grammar makes the model write arguments.
pub fn python_json(value: &Value) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, PythonFormatter);
    value
        .serialize(&mut ser)
        .expect("a JSON value always serializes");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

struct PythonFormatter;

/// `", "` before every item but the first, of arrays and objects alike.
fn item_separator<W: ?Sized + std::io::Write>(writer: &mut W, first: bool) -> std::io::Result<()> {
    if first {
        Ok(())
    } else {
        writer.write_all(b", ")
    }
}

impl serde_json::ser::Formatter for PythonFormatter {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        item_separator(writer, first)
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        item_separator(writer, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        writer.write_all(b": ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn python_json_spaces_separators_and_keeps_key_order() {
        let v = json!({"name": "f", "arguments": {"b": [1, 2], "a": "x"}});
        assert_eq!(
            python_json(&v),
            r#"{"name": "f", "arguments": {"b": [1, 2], "a": "x"}}"#
        );
    }
}

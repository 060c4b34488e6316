//! The model's chat template, from its GGUF metadata or a file the user gives, rendered with
//! minijinja.
//!
//! Templates are written for Python's Jinja2, so Python string methods (`.strip()`,
//! `.startswith()`) are enabled, and `raise_exception` is provided as Hugging Face does.
//!
//! A model without a template gets none: base models (Gemma 3 270M) were never trained on a
//! turn format, and any format braid guessed would render prompts the model cannot read while
//! looking like a working chat endpoint. Callers refuse chat instead and say how to supply one.

use crate::error::{ModelError, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

pub struct ChatTemplate {
    env: minijinja::Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
}

impl ChatTemplate {
    /// Compiles `source`; a template that does not parse is an error here, not at the first
    /// request.
    pub fn new(source: &str, bos_token: String, eos_token: String) -> Result<Self> {
        let mut env = minijinja::Environment::new();
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> std::result::Result<String, minijinja::Error> {
                Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    msg,
                ))
            },
        );
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| ModelError::Template(e.to_string()))?;
        Ok(Self {
            env,
            source: source.to_string(),
            bos_token,
            eos_token,
        })
    }

    /// Reads a template file and checks that it compiles, so a bad file stops start-up with
    /// its name instead of failing every chat request later.
    pub fn read_file(path: &Path) -> Result<String> {
        let source = std::fs::read_to_string(path)
            .map_err(|e| ModelError::Template(format!("cannot read {}: {e}", path.display())))?;
        Self::new(&source, String::new(), String::new()).map_err(|e| {
            ModelError::Template(format!(
                "{} is not a valid Jinja template: {}",
                path.display(),
                match e {
                    ModelError::Template(reason) => reason,
                    other => other.to_string(),
                }
            ))
        })?;
        Ok(source)
    }

    /// The Jinja source, as clients that render chats themselves ask for it.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The text the template's `bos_token` stands for (empty when the GGUF names none).
    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }

    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        let tmpl = self
            .env
            .get_template("chat")
            .map_err(|e| ModelError::Template(e.to_string()))?;
        tmpl.render(minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token,
            eos_token => self.eos_token,
        })
        .map_err(|e| ModelError::Template(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(role: &str, content: &str) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }

    #[test]
    fn a_template_renders_the_turns_and_the_special_tokens() {
        let source = "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}<model>{% endif %}";
        let t = ChatTemplate::new(source, "<s>".into(), "</s>".into()).unwrap();
        let got = t.render(&[message("user", " hi ")], true).unwrap();
        assert_eq!(got, "<s><user>hi</s><model>");
        assert_eq!(
            t.render(&[message("user", "hi")], false).unwrap(),
            "<s><user>hi</s>"
        );
    }

    #[test]
    fn an_unreadable_or_invalid_template_file_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.jinja");
        let msg = ChatTemplate::read_file(&missing).unwrap_err().to_string();
        assert!(
            msg.contains("missing.jinja") && msg.contains("cannot read"),
            "{msg}"
        );
        let broken = dir.path().join("broken.jinja");
        std::fs::write(&broken, "{% for m in messages %}{{ m.content }}").unwrap();
        let msg = ChatTemplate::read_file(&broken).unwrap_err().to_string();
        assert!(
            msg.contains("broken.jinja") && msg.contains("not a valid Jinja template"),
            "{msg}"
        );
        let good = dir.path().join("good.jinja");
        std::fs::write(&good, "{% for m in messages %}{{ m.content }}{% endfor %}").unwrap();
        assert!(ChatTemplate::read_file(&good)
            .unwrap()
            .starts_with("{% for"));
    }
}

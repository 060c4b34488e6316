//! The model's chat template, from its GGUF metadata or a file the user gives, rendered with
//! minijinja.
//!
//! Templates are written for Python's Jinja2, so Python string methods (`.strip()`,
//! `.startswith()`) are enabled, and `raise_exception` and `strftime_now` are provided as
//! Hugging Face provides them.
//!
//! A model without a template gets none: base models (Gemma 3 270M) were never trained on a
//! turn format, and any format braid guessed would render prompts the model cannot read while
//! looking like a working chat endpoint. Callers refuse chat instead and say how to supply one.

use crate::error::{Result, TextError};
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
    /// An assistant turn's calls, as Hugging Face templates read them: `{"id", "type":
    /// "function", "function": {"name", "arguments"}}` with `arguments` an object, not the
    /// JSON string OpenAI's wire format carries. Absent (not null) otherwise, so templates'
    /// `is defined` tests hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<serde_json::Value>>,
    /// A `tool` turn's answer to this call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// An assistant turn's reasoning, as Qwen3's template reads it; templates that drop
    /// earlier turns' reasoning (most) never look.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

pub struct ChatTemplate {
    env: minijinja::Environment<'static>,
    source: String,
    /// The variables the template reads that it does not set itself.
    reads: std::collections::HashSet<String>,
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
        // Hugging Face's: today's date (UTC) in the template's format.
        env.add_function("strftime_now", |format: String| -> String {
            jiff::Timestamp::now().strftime(&format).to_string()
        });
        env.add_filter("tojson", tojson);
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| TextError::Template(e.to_string()))?;
        let globals: Vec<String> = env.globals().map(|(name, _)| name.to_string()).collect();
        let mut reads = env
            .get_template("chat")
            .map_err(|e| TextError::Template(e.to_string()))?
            .undeclared_variables(false);
        // Functions the environment provides (`raise_exception`, `namespace`) are not settable.
        reads.retain(|name| !globals.contains(name));
        Ok(Self {
            env,
            source: source.to_string(),
            reads,
            bos_token,
            eos_token,
        })
    }

    /// Reads a template file and checks that it compiles, so a bad file stops start-up with
    /// its name instead of failing every chat request later.
    pub fn read_file(path: &Path) -> Result<String> {
        let source = std::fs::read_to_string(path)
            .map_err(|e| TextError::Template(format!("cannot read {}: {e}", path.display())))?;
        Self::new(&source, String::new(), String::new()).map_err(|e| {
            TextError::Template(format!(
                "{} is not a valid Jinja template: {}",
                path.display(),
                match e {
                    TextError::Template(reason) => reason,
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

    /// Whether the template renders `tools` itself (Qwen's, Llama 3.1's, Hermes'); others
    /// need the tools described in the conversation by the caller.
    pub fn knows_tools(&self) -> bool {
        self.source.contains("tools")
    }

    /// Whether the template reads variable `name` without setting it (as Qwen3's reads
    /// `enable_thinking`): what a request's `chat_template_kwargs` may set.
    pub fn reads(&self, name: &str) -> bool {
        self.reads.contains(name) && !RENDER_VARIABLES.contains(&name)
    }

    /// The variables a request may set ([`reads`](Self::reads)), unordered.
    pub fn variables(&self) -> impl Iterator<Item = &str> {
        self.reads
            .iter()
            .map(String::as_str)
            .filter(|v| !RENDER_VARIABLES.contains(v))
    }

    /// Renders the conversation; `tools` (OpenAI's `{"type": "function", "function": ...}`
    /// objects) is passed as Hugging Face passes it, for templates that [know
    /// tools](Self::knows_tools). `extra` holds more variables (a request's
    /// `chat_template_kwargs`), each one the template [reads](Self::reads).
    pub fn render(
        &self,
        messages: &[ChatMessage],
        tools: Option<&[serde_json::Value]>,
        add_generation_prompt: bool,
        extra: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String> {
        let tmpl = self
            .env
            .get_template("chat")
            .map_err(|e| TextError::Template(e.to_string()))?;
        let base = minijinja::context! {
            messages => messages,
            tools => tools,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token,
            eos_token => self.eos_token,
        };
        let extra = minijinja::Value::from_serialize(extra);
        tmpl.render(minijinja::context! { ..base, ..extra })
            .map_err(|e| TextError::Template(e.to_string()))
    }
}

/// The variables braid itself sets when it renders, which no request may set.
const RENDER_VARIABLES: &[&str] = &[
    "messages",
    "tools",
    "add_generation_prompt",
    "bos_token",
    "eos_token",
];

/// `tojson` as Hugging Face's template environment defines it (`json.dumps` with
/// `ensure_ascii=False`): `", "` and `": "` between items, no HTML escaping, `indent` for
/// pretty output. minijinja's own writes compact, HTML-safe JSON, which would render tools
/// and calls in a layout the model never saw in training.
fn tojson(
    value: minijinja::Value,
    indent: Option<usize>,
    kwargs: minijinja::value::Kwargs,
) -> std::result::Result<String, minijinja::Error> {
    let indent = kwargs.get::<Option<usize>>("indent")?.or(indent);
    for ignored in ["ensure_ascii", "sort_keys", "separators"] {
        let _: Option<minijinja::Value> = kwargs.get(ignored)?;
    }
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(&value).map_err(|e| {
        minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, e.to_string())
    })?;
    Ok(match indent {
        None => crate::python_json::python_json(&json),
        Some(n) => {
            let spaces = vec![b' '; n];
            let mut out = Vec::new();
            let formatter = serde_json::ser::PrettyFormatter::with_indent(&spaces);
            let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
            serde::Serialize::serialize(&json, &mut ser).map_err(|e| {
                minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, e.to_string())
            })?;
            String::from_utf8_lossy(&out).into_owned()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(role: &str, content: &str) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
            ..ChatMessage::default()
        }
    }

    #[test]
    fn a_template_renders_the_turns_and_the_special_tokens() {
        let source = "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}<model>{% endif %}";
        let t = ChatTemplate::new(source, "<s>".into(), "</s>".into()).unwrap();
        let got = t
            .render(&[message("user", " hi ")], None, true, &Default::default())
            .unwrap();
        assert_eq!(got, "<s><user>hi</s><model>");
        assert_eq!(
            t.render(&[message("user", "hi")], None, false, &Default::default())
                .unwrap(),
            "<s><user>hi</s>"
        );
    }

    #[test]
    fn a_template_that_knows_tools_gets_them_and_the_calls_as_objects() {
        let source = "{% for t in tools %}[{{ t.function.name }}]{% endfor %}{% for m in messages %}{{ m.role }}:{% if m.tool_calls is defined %}{% for c in m.tool_calls %}{{ c.function.name }}({{ c.function.arguments.a }}){% endfor %}{% else %}{{ m.content }}{% endif %}{% if m.tool_call_id is defined %}#{{ m.tool_call_id }}{% endif %};{% endfor %}";
        let t = ChatTemplate::new(source, String::new(), String::new()).unwrap();
        assert!(t.knows_tools());
        let tools = [serde_json::json!({"type": "function", "function": {"name": "add"}})];
        let mut call = message("assistant", "");
        call.tool_calls = Some(vec![serde_json::json!(
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": {"a": 2}}}
        )]);
        let mut result = message("tool", "4");
        result.tool_call_id = Some("c1".into());
        let got = t
            .render(
                &[message("user", "2+2"), call, result],
                Some(&tools),
                false,
                &Default::default(),
            )
            .unwrap();
        assert_eq!(got, "[add]user:2+2;assistant:add(2);tool:4#c1;");
        let plain = ChatTemplate::new("{{ messages[0].content }}", String::new(), String::new());
        assert!(!plain.unwrap().knows_tools());
    }

    #[test]
    fn tojson_writes_json_as_python_s_json_dumps_does() {
        let source = "{{ messages[0].tool_calls[0] | tojson }}|{{ messages[0].tool_calls[0].b | tojson(indent=2) }}";
        let t = ChatTemplate::new(source, String::new(), String::new()).unwrap();
        let mut m = message("assistant", "");
        m.tool_calls = Some(vec![
            serde_json::json!({"z": "<é>", "b": [1, 2], "a": {"k": null}}),
        ]);
        assert_eq!(
            t.render(&[m], None, false, &Default::default()).unwrap(),
            "{\"z\": \"<é>\", \"b\": [1, 2], \"a\": {\"k\": null}}|[\n  1,\n  2\n]"
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

    #[test]
    fn a_template_s_own_variables_can_be_set() {
        let qwen3 = ChatTemplate::new(
            include_str!("../tests/data/templates/Qwen-Qwen3-0.6B.jinja"),
            String::new(),
            String::new(),
        )
        .unwrap();
        assert!(qwen3.reads("enable_thinking"));
        assert!(!qwen3.reads("reasoning_effort"));
        assert!(
            !qwen3.reads("messages"),
            "braid's own variables are not the request's"
        );
        assert!(!qwen3.reads("namespace") && !qwen3.reads("raise_exception"));
        assert_eq!(qwen3.variables().collect::<Vec<_>>(), ["enable_thinking"]);
        let hi = [message("user", "hi")];
        let default = qwen3.render(&hi, None, true, &Default::default()).unwrap();
        assert!(default.ends_with("<|im_start|>assistant\n"), "{default}");
        let mut off = serde_json::Map::new();
        off.insert("enable_thinking".into(), serde_json::json!(false));
        let off = qwen3.render(&hi, None, true, &off).unwrap();
        assert!(
            off.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"),
            "{off}"
        );
    }

    /// Qwen3's template writes the reasoning of the turn in progress (a call and its result
    /// after the last user message) back into the prompt; braid passes it as sent.
    #[test]
    fn an_assistant_turn_s_reasoning_reaches_the_template() {
        let qwen3 = ChatTemplate::new(
            include_str!("../tests/data/templates/Qwen-Qwen3-0.6B.jinja"),
            String::new(),
            String::new(),
        )
        .unwrap();
        let call = serde_json::json!({"id": "c", "type": "function",
            "function": {"name": "f", "arguments": {}}});
        let turn = [
            message("user", "hi"),
            ChatMessage {
                role: "assistant".into(),
                content: String::new(),
                tool_calls: Some(vec![call]),
                reasoning_content: Some("Call f.".into()),
                ..ChatMessage::default()
            },
            ChatMessage {
                role: "tool".into(),
                content: "done".into(),
                tool_call_id: Some("c".into()),
                ..ChatMessage::default()
            },
        ];
        let text = qwen3
            .render(&turn, None, true, &Default::default())
            .unwrap();
        assert!(text.contains("<think>\nCall f.\n</think>"), "{text}");
    }
}

//! Tool calling as a chat request asks for it: which functions the model may call, whether
//! it must call one, and how many calls one answer may hold.
//!
//! `required` and a named function are grammars over the model's call syntax (the template's,
//! or `--tool-call-parser`), so the answer is calls whose arguments follow each function's
//! `parameters` by construction; `auto` leaves the model free and reads back the calls it
//! writes. `none` renders no tools at all: a model shown functions it may not call tends to
//! call them anyway.

use crate::args::ToolCallParser;
use crate::error::ValidationError;
use crate::openai_types::{ChatCompletionRequest, ToolIn};
use braid_text::tool_calls::{Besides, CallParser, Function, ToolSyntax};
use braid_text::{ChatTemplate, Constraint};
use serde_json::{json, Value};

/// Most functions one request may offer, OpenAI's own bound. Every one is described in the
/// prompt, so more would mostly fill the context.
pub const MAX_TOOLS: usize = 128;

/// Longest function name, OpenAI's bound.
const MAX_NAME_LEN: usize = 64;

/// A chat request's tools, validated (absent with `tool_choice: "none"` or no tools).
#[derive(Clone, Debug)]
pub struct ToolCalling {
    /// The functions as templates and the tools prompt render them: OpenAI's
    /// `{"type": "function", "function": {...}}` objects.
    pub rendered: Vec<Value>,
    /// The grammar of the answer: calls only (`required`, a named function), or free text in
    /// which every call is held to the functions once it opens (`auto`).
    pub enforced: Option<Constraint>,
    pub reading: CallReading,
}

/// How a choice's answer is read for calls.
#[derive(Clone, Debug)]
pub struct CallReading {
    functions: Vec<Function>,
    parallel: bool,
    syntax: ToolSyntax,
}

impl CallReading {
    pub fn parser(&self) -> CallParser {
        CallParser::new(self.syntax, self.functions.clone(), self.parallel)
    }

    #[cfg(test)]
    pub(crate) fn for_names(names: Vec<String>, parallel: bool) -> Self {
        let functions = names
            .into_iter()
            .map(|name| Function {
                name,
                schema: json!({"type": "object"}),
            })
            .collect();
        Self {
            functions,
            parallel,
            syntax: ToolSyntax::Hermes,
        }
    }
}

fn invalid(param: impl Into<String>, reason: impl Into<String>) -> ValidationError {
    ValidationError::InvalidTool {
        param: param.into(),
        reason: reason.into(),
    }
}

/// The syntax the served model's tool calls are read in: `parser` as given, or the chat
/// template's. A template that renders no tools gets them described in the Hermes syntax, so
/// any other syntax named for it is refused, saying so.
pub fn served_syntax(
    parser: ToolCallParser,
    template: Option<&ChatTemplate>,
) -> Result<ToolSyntax, String> {
    let renders_tools = template.is_some_and(|t| t.knows_tools());
    let named = match parser {
        ToolCallParser::Auto => {
            return Ok(match template.filter(|t| t.knows_tools()) {
                Some(t) => ToolSyntax::of_template(t.source()),
                None => ToolSyntax::Hermes,
            })
        }
        ToolCallParser::Hermes => ToolSyntax::Hermes,
        ToolCallParser::Llama3Json => ToolSyntax::Llama3Json,
        ToolCallParser::Qwen3Coder => ToolSyntax::Qwen3Coder,
        ToolCallParser::Mistral => ToolSyntax::Mistral,
    };
    if named != ToolSyntax::Hermes && !renders_tools {
        return Err(format!(
            "--tool-call-parser {} needs a chat template that renders tools; this model's does \
             not, so braid describes tools to it in the Hermes syntax (drop the flag, or give a \
             template that renders tools with --chat-template)",
            named.name()
        ));
    }
    Ok(named)
}

/// A chat request's `tools`, `tool_choice` and `parallel_tool_calls`, checked together, for a
/// model that calls in `syntax`.
pub fn tool_calling(
    req: &ChatCompletionRequest,
    syntax: ToolSyntax,
) -> Result<Option<ToolCalling>, ValidationError> {
    offered(
        req.tools.as_deref().unwrap_or_default(),
        req.tool_choice.as_ref(),
        req.parallel_tool_calls,
        syntax,
    )
}

/// The tools as a prompt offers them with `tool_choice: "auto"`, for /tokenize.
pub fn rendered(tools: &[ToolIn]) -> Result<Option<Vec<Value>>, ValidationError> {
    Ok(offered(tools, None, None, ToolSyntax::Hermes)?.map(|t| t.rendered))
}

fn offered(
    tools: &[ToolIn],
    tool_choice: Option<&Value>,
    parallel_tool_calls: Option<bool>,
    syntax: ToolSyntax,
) -> Result<Option<ToolCalling>, ValidationError> {
    if tools.len() > MAX_TOOLS {
        return Err(invalid(
            "tools",
            format!(
                "holds {} functions; at most {MAX_TOOLS} are accepted",
                tools.len()
            ),
        ));
    }
    let mut names: Vec<String> = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        if tool.kind != "function" {
            return Err(invalid(
                format!("tools[{i}].type"),
                format!("is `{}`; the only kind of tool is `function`", tool.kind),
            ));
        }
        let name = &tool.function.name;
        let valid_name = !name.is_empty()
            && name.len() <= MAX_NAME_LEN
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid_name {
            return Err(invalid(
                format!("tools[{i}].function.name"),
                format!("is {name:?}; a name is 1 to {MAX_NAME_LEN} of a-z, A-Z, 0-9, `_` and `-`"),
            ));
        }
        if names.contains(name) {
            return Err(invalid(
                format!("tools[{i}].function.name"),
                format!("`{name}` is offered twice"),
            ));
        }
        if let Some(p) = &tool.function.parameters {
            if !p.is_object() {
                return Err(invalid(
                    format!("tools[{i}].function.parameters"),
                    "must be a JSON Schema object",
                ));
            }
        }
        names.push(name.clone());
    }
    let choice = choice(tool_choice, &names)?;
    if tools.is_empty() {
        return match choice {
            Choice::None | Choice::Auto => Ok(None),
            _ => Err(invalid(
                "tool_choice",
                "asks for a call, but `tools` offers no function",
            )),
        };
    }
    let parallel = parallel_tool_calls.unwrap_or(true);
    let functions = |wanted: Option<&str>| -> Vec<Function> {
        tools
            .iter()
            .filter(|t| wanted.is_none_or(|w| w == t.function.name))
            .map(|t| Function {
                name: t.function.name.clone(),
                schema: arguments_schema(t),
            })
            .collect()
    };
    let enforced = match &choice {
        Choice::None => return Ok(None),
        // Free text, and every call it opens held to the functions' grammar.
        Choice::Auto => Some(Constraint::ToolCalls {
            functions: functions(None),
            parallel,
            syntax,
            besides: Besides::Text,
        }),
        Choice::Required => Some(Constraint::ToolCalls {
            functions: functions(None),
            parallel,
            syntax,
            besides: Besides::Nothing,
        }),
        // OpenAI's named choice is one call to that function.
        Choice::Named(name) => Some(Constraint::ToolCalls {
            functions: functions(Some(name)),
            parallel: false,
            syntax,
            besides: Besides::Nothing,
        }),
    };
    let rendered = tools
        .iter()
        .map(|t| json!({"type": "function", "function": t.function}))
        .collect();
    Ok(Some(ToolCalling {
        rendered,
        enforced,
        reading: CallReading {
            functions: functions(None),
            parallel,
            syntax,
        },
    }))
}

/// The JSON Schema a call's arguments follow: the function's `parameters`, every object in it
/// closed ([`closed`]), or an empty object for a function without them (OpenAI's reading of an
/// omitted `parameters`).
fn arguments_schema(tool: &ToolIn) -> Value {
    match &tool.function.parameters {
        Some(p) => closed(p.clone()),
        None => json!({"type": "object", "properties": {}, "additionalProperties": false}),
    }
}

/// `schema` with `additionalProperties: false` on every object schema that does not say
/// otherwise, as OpenAI's strict mode and xgrammar read tool parameters (and `strict`
/// response formats). JSON Schema's own
/// default admits any other property, and a small model forced into a call would then add
/// one it invented and ramble inside it until `max_tokens` (langchain-openai's
/// `with_structured_output` showed it: issue 30).
pub(crate) fn closed(mut schema: Value) -> Value {
    close(&mut schema);
    schema
}

fn close(schema: &mut Value) {
    let Value::Object(map) = schema else {
        return;
    };
    let is_object = map.contains_key("properties")
        || map.get("type").is_some_and(|t| {
            t == "object"
                || t.as_array()
                    .is_some_and(|a| a.iter().any(|t| t == "object"))
        });
    if is_object && !map.contains_key("additionalProperties") {
        map.insert("additionalProperties".into(), Value::Bool(false));
    }
    for key in ["properties", "$defs", "definitions", "patternProperties"] {
        if let Some(Value::Object(children)) = map.get_mut(key) {
            children.values_mut().for_each(close);
        }
    }
    for key in ["items", "additionalProperties", "not", "if", "then", "else"] {
        if let Some(child) = map.get_mut(key) {
            close(child);
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(Value::Array(children)) = map.get_mut(key) {
            children.iter_mut().for_each(close);
        }
    }
}

enum Choice {
    None,
    Auto,
    Required,
    Named(String),
}

/// `tool_choice`, defaulting as OpenAI does: `auto` with tools, `none` without.
fn choice(raw: Option<&Value>, names: &[String]) -> Result<Choice, ValidationError> {
    const SHAPE: &str = "must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}";
    let named = |v: &Value| -> Option<String> {
        (v.get("type")?.as_str()? == "function")
            .then(|| v.get("function")?.get("name")?.as_str().map(str::to_string))?
    };
    match raw {
        None | Some(Value::Null) if names.is_empty() => Ok(Choice::None),
        None | Some(Value::Null) => Ok(Choice::Auto),
        Some(Value::String(s)) => match s.as_str() {
            "none" => Ok(Choice::None),
            "auto" => Ok(Choice::Auto),
            "required" => Ok(Choice::Required),
            _ => Err(invalid("tool_choice", format!("is {s:?}; it {SHAPE}"))),
        },
        Some(v @ Value::Object(_)) => match named(v) {
            Some(name) if names.contains(&name) => Ok(Choice::Named(name)),
            Some(name) => Err(invalid(
                "tool_choice",
                format!("names the function `{name}`, which `tools` does not offer"),
            )),
            None => Err(invalid("tool_choice", SHAPE)),
        },
        Some(_) => Err(invalid("tool_choice", SHAPE)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_parameters_are_closed_objects_unless_they_say_otherwise() {
        let schema = json!({
            "type": "object",
            "properties": {
                "pet": {"type": "object", "properties": {"name": {"type": "string"}}},
                "tags": {"type": "array", "items": {"properties": {"k": {"type": "string"}}}},
                "extra": {"type": "object", "additionalProperties": true},
                "either": {"anyOf": [{"type": "object"}, {"type": "null"}]},
            },
            "$defs": {"Owner": {"type": ["object", "null"]}},
        });
        let got = closed(schema);
        assert_eq!(got["additionalProperties"], false);
        assert_eq!(got["properties"]["pet"]["additionalProperties"], false);
        assert_eq!(
            got["properties"]["tags"]["items"]["additionalProperties"],
            false
        );
        assert_eq!(got["properties"]["extra"]["additionalProperties"], true);
        assert_eq!(
            got["properties"]["either"]["anyOf"][0]["additionalProperties"],
            false
        );
        assert_eq!(
            got["properties"]["either"]["anyOf"][1].get("additionalProperties"),
            None
        );
        assert_eq!(got["$defs"]["Owner"]["additionalProperties"], false);
        assert_eq!(
            got["properties"]["pet"]["properties"]["name"].get("additionalProperties"),
            None
        );
    }

    fn request(body: Value) -> ChatCompletionRequest {
        serde_json::from_value(body).unwrap()
    }

    fn tool_calling_hermes(
        req: &ChatCompletionRequest,
    ) -> Result<Option<ToolCalling>, ValidationError> {
        tool_calling(req, ToolSyntax::Hermes)
    }

    fn tool(name: &str) -> Value {
        json!({"type": "function", "function": {"name": name, "parameters":
            {"type": "object", "properties": {"x": {"type": "integer"}}}}})
    }

    fn refused(body: Value) -> (String, String) {
        match tool_calling_hermes(&request(body)).expect_err("refused") {
            e @ ValidationError::InvalidTool { .. } => {
                (e.param().unwrap().to_string(), e.to_string())
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_choice_decides_what_is_enforced() {
        let auto = tool_calling_hermes(&request(json!({"tools": [tool("a"), tool("b")]})))
            .unwrap()
            .unwrap();
        assert!(matches!(
            auto.enforced,
            Some(Constraint::ToolCalls {
                besides: Besides::Text,
                ..
            })
        ));
        assert_eq!(auto.rendered.len(), 2);
        assert_eq!(auto.rendered[0]["function"]["name"], "a");
        let none = request(json!({"tools": [tool("a")], "tool_choice": "none"}));
        assert!(tool_calling_hermes(&none).unwrap().is_none());
        assert!(tool_calling_hermes(&request(json!({}))).unwrap().is_none());
        let required = request(
            json!({"tools": [tool("a"), tool("b")], "tool_choice": "required",
            "parallel_tool_calls": false}),
        );
        match tool_calling_hermes(&required).unwrap().unwrap().enforced {
            Some(Constraint::ToolCalls {
                functions,
                parallel,
                ..
            }) => {
                assert_eq!(functions.len(), 2);
                assert!(!parallel);
            }
            other => panic!("{other:?}"),
        }
        let named = request(json!({"tools": [tool("a"), tool("b")],
            "tool_choice": {"type": "function", "function": {"name": "b"}}}));
        match tool_calling_hermes(&named).unwrap().unwrap().enforced {
            Some(Constraint::ToolCalls { functions, .. }) => {
                assert_eq!(functions.len(), 1);
                assert_eq!(functions[0].name, "b");
            }
            other => panic!("{other:?}"),
        }
        let bare = request(
            json!({"tools": [{"type": "function", "function": {"name": "f"}}],
            "tool_choice": "required"}),
        );
        match tool_calling_hermes(&bare).unwrap().unwrap().enforced {
            Some(Constraint::ToolCalls { functions, .. }) => {
                assert_eq!(functions[0].schema["additionalProperties"], false)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_tools_and_choices_are_refused_naming_the_field() {
        let many: Vec<Value> = (0..1000).map(|i| tool(&format!("f{i}"))).collect();
        let (param, msg) = refused(json!({"tools": many}));
        assert_eq!(param, "tools");
        assert!(msg.contains("1000") && msg.contains("128"), "{msg}");
        let (param, msg) = refused(json!({"tools": [tool("a")],
            "tool_choice": {"type": "function", "function": {"name": "nope"}}}));
        assert_eq!(param, "tool_choice");
        assert!(msg.contains("`nope`"), "{msg}");
        let (param, _) = refused(json!({"tool_choice": "required"}));
        assert_eq!(param, "tool_choice");
        let (param, _) = refused(json!({"tools": [tool("a")], "tool_choice": "always"}));
        assert_eq!(param, "tool_choice");
        let (param, _) = refused(json!({"tools": [tool("a")], "tool_choice": {"type": "x"}}));
        assert_eq!(param, "tool_choice");
        let (param, _) = refused(json!({"tools": [tool("a b")]}));
        assert_eq!(param, "tools[0].function.name");
        let (param, _) = refused(json!({"tools": [tool("a"), tool("a")]}));
        assert_eq!(param, "tools[1].function.name");
        let (param, _) =
            refused(json!({"tools": [{"type": "retrieval", "function": {"name": "a"}}]}));
        assert_eq!(param, "tools[0].type");
        let (param, _) = refused(
            json!({"tools": [{"type": "function", "function": {"name": "a", "parameters": [1]}}]}),
        );
        assert_eq!(param, "tools[0].function.parameters");
    }
}

//! POST /tokenize and POST /detokenize (vLLM's endpoints): what the server would read, for
//! clients that budget context or debug prompts, with the same validation as generation.

use crate::error::{ApiError, ValidationError};
use crate::json_body::ApiJson;
use crate::openai_types::{
    DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse,
};
use crate::routes::blocking;
use crate::state::AppState;
use crate::tools;
use crate::validation;
use axum::extract::State;
use axum::Json;

pub async fn tokenize(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<TokenizeRequest>,
) -> Result<Json<TokenizeResponse>, ApiError> {
    let ready = state.ready()?;
    validation::check_model(req.model.as_deref(), &ready.limits)?;
    let model = ready.generator()?.clone();
    let special_in_messages = ready.limits.special_in_messages;
    let tokens = blocking(&state, move || match (&req.prompt, &req.messages) {
        (Some(prompt), None) => {
            validation::encode(&model, prompt, req.add_special_tokens.unwrap_or(true))
        }
        (None, Some(messages)) => {
            if req.add_special_tokens == Some(true) {
                return Err(ValidationError::Unsupported {
                    field: "add_special_tokens",
                    reason: "with `messages`: the chat template and the model's tokenizer settings place the special tokens",
                });
            }
            let tools = tools::rendered(req.tools.as_deref().unwrap_or_default())?;
            let end = validation::ChatEnd::of(
                req.add_generation_prompt,
                req.continue_final_message,
            )?;
            validation::chat_prompt(
                messages,
                tools.as_deref(),
                end,
                &model,
                special_in_messages,
                &validation::template_variables(req.chat_template_kwargs.as_ref(), None, &model)?,
            )
        }
        _ => Err(ValidationError::ExactlyOne {
            first: "prompt",
            second: "messages",
        }),
    })
    .await??;
    Ok(Json(TokenizeResponse {
        count: tokens.len(),
        tokens,
        max_model_len: ready.limits.context_length,
    }))
}

pub async fn detokenize(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<DetokenizeRequest>,
) -> Result<Json<DetokenizeResponse>, ApiError> {
    let ready = state.ready()?;
    validation::check_model(req.model.as_deref(), &ready.limits)?;
    let ids = req
        .tokens
        .ok_or(ValidationError::Missing { field: "tokens" })?;
    let ids = validation::known_token_ids("tokens", &ids, &ready.limits)?;
    Ok(Json(DetokenizeResponse {
        prompt: ready.generator()?.tokenizer.decode(&ids, false),
    }))
}

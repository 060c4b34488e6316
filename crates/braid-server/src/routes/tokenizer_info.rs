//! GET /tokenizer_info (vLLM's endpoint): the tokenizer's named tokens and chat template.
//!
//! lm-evaluation-harness asks for it, with /tokenize, to use the server's own tokenizer;
//! without it the harness turns to a model hub for one, which an offline machine lacks.

use crate::error::ApiError;
use crate::openai_types::TokenizerInfoResponse;
use crate::state::AppState;
use axum::extract::State;
use axum::Json;

pub async fn tokenizer_info(
    State(state): State<AppState>,
) -> Result<Json<TokenizerInfoResponse>, ApiError> {
    let ready = state.ready()?;
    let model = ready.generator()?;
    let tokenizer = &model.tokenizer;
    let named = tokenizer.named_tokens();
    let text = |id: Option<u32>| id.map(|id| tokenizer.decode(&[id], false));
    Ok(Json(TokenizerInfoResponse {
        tokenizer_class: "braid-gguf",
        bos_token: text(named.bos),
        eos_token: text(named.eos),
        pad_token: text(named.pad),
        unk_token: text(named.unk),
        bos_token_id: named.bos,
        eos_token_id: named.eos,
        pad_token_id: named.pad,
        add_bos_token: named.add_bos,
        chat_template: model.chat_template.as_ref().map(|t| t.source().to_string()),
        model_max_length: ready.limits.context_length,
        vocab_size: tokenizer.vocab_size(),
    }))
}

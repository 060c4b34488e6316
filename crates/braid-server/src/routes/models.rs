//! GET /v1/models and GET /v1/models/{id}: the generation model this server serves, and its
//! embedding model when it has one.

use crate::error::ApiError;
use crate::openai_types::{ModelCard, ModelList};
use crate::state::{AppState, Ready};
use crate::validation;
use axum::extract::{Path, State};
use axum::Json;

fn card(state: &AppState, ready: &Ready) -> ModelCard {
    ModelCard {
        id: state.served_model_name.clone(),
        object: "model",
        created: ready.created,
        owned_by: "braid",
        max_model_len: ready.limits.context_length,
    }
}

/// The embedding model's card, when one is served.
fn embedding_card(ready: &Ready) -> Option<ModelCard> {
    ready.embedder.as_ref().map(|e| ModelCard {
        id: e.id().to_string(),
        object: "model",
        created: ready.created,
        owned_by: "braid",
        max_model_len: e.max_tokens(),
    })
}

pub async fn list_models(State(state): State<AppState>) -> Result<Json<ModelList>, ApiError> {
    let ready = state.ready()?;
    Ok(Json(ModelList {
        object: "list",
        data: ready
            .generator()
            .is_ok()
            .then(|| card(&state, ready))
            .into_iter()
            .chain(embedding_card(ready))
            .collect(),
    }))
}

pub async fn get_model(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<ModelCard>, ApiError> {
    let ready = state.ready()?;
    if let Some(card) = embedding_card(ready).filter(|c| c.id == id) {
        return Ok(Json(card));
    }
    ready.generator()?;
    validation::check_model(Some(&id), &ready.limits)?;
    Ok(Json(card(&state, ready)))
}

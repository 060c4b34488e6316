//! GET /v1/models and GET /v1/models/{id}: the one model this server serves.

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

pub async fn list_models(State(state): State<AppState>) -> Result<Json<ModelList>, ApiError> {
    let ready = state.ready()?;
    Ok(Json(ModelList {
        object: "list",
        data: vec![card(&state, ready)],
    }))
}

pub async fn get_model(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<ModelCard>, ApiError> {
    let ready = state.ready()?;
    validation::check_model(Some(&id), &ready.limits)?;
    Ok(Json(card(&state, ready)))
}

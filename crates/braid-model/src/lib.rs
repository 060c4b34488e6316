//! braid-model

//! braid-server

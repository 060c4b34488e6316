//! braid-sched

//! Shared helpers for integration tests.
#![allow(dead_code)]

pub mod controllers;
pub mod e2e;
pub mod etcd_e2e;
pub mod failpoints;
pub mod pki;
pub mod sandbox;
pub mod skip;

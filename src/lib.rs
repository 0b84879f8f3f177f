//! certrenewd: keeps the TLS certificates of control-plane nodes from expiring.
//!
//! Data flows one way: Settings -> Inventory -> Plan -> RenewOutcomes -> RestartOutcomes -> Alarms.
#![forbid(unsafe_code)]

pub mod alarms;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod der;
pub mod fsutil;
pub mod inhibit;
pub mod inventory;
pub mod lock;
pub mod logging;
pub mod metrics;
pub mod pass;
pub mod plan;
pub mod renew;
pub mod restart;
pub mod verify;

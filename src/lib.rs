//! certrenewd: keeps the TLS certificates of control-plane nodes from expiring.
//!
//! Data flows one way: Settings -> Inventory -> Plan -> RenewOutcomes -> RestartOutcomes -> Alarms.
#![forbid(unsafe_code)]

pub mod alarms;
pub mod cli;
pub mod config;
pub mod der;
pub mod inventory;
pub mod logging;
pub mod plan;
pub mod restart;

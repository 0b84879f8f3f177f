//! certrenewd: keeps the TLS certificates of control-plane nodes from expiring.
//!
//! Data flows one way: Settings -> Inventory -> Plan -> RenewOutcomes -> RestartOutcomes -> Alarms.
// Three documented exceptions: `daemon::memory::release_freed` and `cap_arenas` call glibc's
// malloc_trim and mallopt, and
// `daemon::wall_clock::until` registers its timerfd with tokio (`AsyncFd::register_with_interest`).
#![deny(unsafe_code)]

pub mod alarms;
pub mod causes;
pub mod child;
pub mod cli;
pub mod config;
pub mod coordinate;
pub mod daemon;
pub mod failpoint;
pub mod format;
pub mod fsutil;
pub mod inventory;
pub mod logging;
pub mod metrics;
pub mod pass;
pub mod plan;
pub mod progress;
pub mod renew;
pub mod restart;
pub mod served;
#[cfg(test)]
mod test_pki;
pub mod timefmt;

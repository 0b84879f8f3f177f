//! certrenewd: keeps the TLS certificates of control-plane nodes from expiring.
//!
//! Data flows one way: Settings -> Inventory -> Plan -> RenewOutcomes -> RestartOutcomes -> Alarms.
// Three documented exceptions: `daemon::memory::release_freed` and `cap_arenas` call glibc's
// malloc_trim and mallopt, and
// `daemon::wall_clock::until` registers its timerfd with tokio (`AsyncFd::register_with_interest`).
#![deny(unsafe_code)]

// In pipeline order, as `tests/layering.rs` holds them: a module uses only those above it.
// Helpers, used everywhere and using no stage:
pub mod causes;
pub mod child;
pub mod failpoint;
pub mod progress;
pub mod live;
pub mod stop;
pub mod fsutil;
pub mod timefmt;
pub mod logging;
pub mod format;
// The stages of a pass, in the order data flows:
pub mod config;
pub mod components;
pub mod inventory;
pub mod served;
pub mod plan;
pub mod renew;
pub mod restart;
pub mod coordinate;
pub mod alarms;
pub mod metrics;
// What drives them:
pub mod pass;
pub mod daemon;
pub mod cli;

#[cfg(test)]
mod test_pki;

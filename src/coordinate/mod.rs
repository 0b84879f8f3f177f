//! Taking turns across the controllers of one cluster, so that their etcd members never
//! restart together and lose the quorum: renewing files stays local, restarting what uses
//! them happens under a cluster-wide lock held in the etcd cluster the controllers already
//! run, with a quorum gate around the local etcd member's restart.
//!
//! The rule, for a pass that owes restarts (also in docs/behaviour.md), decided once and
//! logged:
//! 1. `[coordination] enabled = false`, or `auto` with a single-member cluster (the node's
//!    etcd settings, `node`, or the member list) and no other API server named in
//!    `[coordination] apiservers`: restart as without coordination.
//! 2. No client identity: under `auto` on a node that runs no etcd (no settings, nothing
//!    listening), restart as without coordination; anywhere else hold the restarts.
//! 3. No member answers: the cluster is down only when etcd's member list on record (`roster`,
//!    kept by every pass and the daemon's watch) names two or more members and every URL
//!    known refuses connections (restart as without coordination). This node's own member
//!    down while the pass owes it a restart: that start alone goes ahead, then the others
//!    are joined before anything else restarts. Otherwise hold the restarts. A start
//!    without the lock starts a unit only when it failed, a static pod only when the
//!    container runtime reports no container of it that runs and nothing listens at its
//!    addresses.
//! 4. Members answer without a leader: this node's own member, down and owed a restart,
//!    is started as in 3 when a member that answers lists it as a voter of the cluster its
//!    write-ahead log (`wal`) is of; otherwise hold the restarts.
//! 5. Otherwise take the lock (wait up to `lock_timeout_secs`; for a lease, up to
//!    `gate_timeout_secs`); not had, or refused: restart nothing, keep the new files,
//!    raise 250.003, and retry at the next pass.
//! 6. Under the lock, one component at a time: before the etcd step the members that stay
//!    healthy during it must be a quorum of all voters, by the member list read again then
//!    (else that step alone is held and the rest go on), and a leading member hands its
//!    leadership over; after it the local member must be healthy (both within
//!    `gate_timeout_secs`), else nothing more is restarted (250.003 names the member). The
//!    lock is released at the end.
//!    A cluster of two voters restarts etcd only under `two_member_restarts`, its lease not
//!    counted lost while etcd serves nothing, its key read back before anything further (a
//!    cluster of one, coordinated for its API servers, likewise).
//!    An etcd of another cluster (etcd-events, by the client addresses its settings name)
//!    is gated so on that cluster. An API server's step waits until another API server (the
//!    other controllers' records, `apiservers`) answers `/readyz`, else it alone is held.
//! 7. The lock fences (`lock`): counted lost when its lease goes unconfirmed for half the
//!    TTL; checked before every restart and after every wait, its key read back before and
//!    after each etcd restart. Lost, or not this node's: nothing more is restarted.

mod conn;
mod gate;
pub mod identity;
pub mod lock;
pub mod members;
pub mod node;
mod node_records;
mod outlook;
pub mod publish;
pub mod record;
pub mod roster;
pub mod view;
pub mod wal;

pub use crate::stop::{Stop, StopSender};
pub use gate::{EtcdCaAgreement, EtcdGate};
pub use outlook::{Outlook, outlook};

//! Taking turns across the controllers of one cluster (issue 15): renewing files stays local,
//! restarting what uses them happens under a cluster-wide lock held in the etcd cluster the
//! controllers already run, with a quorum gate around the local etcd member's restart.
//!
//! The rule, for a pass that owes restarts (also in the README):
//! 1. `[coordination] enabled = false`, or `auto` with a single-member cluster or no etcd
//!    client certificate on the node: restart as without coordination.
//! 2. No endpoint answers at all: the cluster is already down and there is no quorum to
//!    protect: restart as without coordination, and log why.
//! 3. Otherwise take the lock (wait up to `lock_timeout_secs`); not had, or refused: restart
//!    nothing, keep the new files, raise 250.003, and retry at the next pass.
//! 4. Under the lock, one component at a time: before the etcd step every other member must
//!    be healthy, after it the local member (both within `gate_timeout_secs`), else nothing
//!    more is restarted (250.003 names the member). The lock is released at the end.
//! 5. The lock fences (`lock`): counted lost when its lease goes unconfirmed for half the
//!    TTL; checked before every restart and after every wait, its key read back before each
//!    etcd restart. Lost, or not this node's: nothing more is restarted.

mod gate;
pub mod identity;
pub mod lock;
pub mod members;

pub use gate::EtcdGate;

//! Files read and written with care, in three jobs: bounded reads of what may not be a
//! regular file ([`bounded_read`]), writes that never leave a file half written
//! ([`careful_write`]), and the daemon's state records ([`state_file`]).

pub mod bounded_read;
pub mod careful_write;
pub mod state_file;

pub use bounded_read::*;
pub use careful_write::*;
pub use state_file::*;

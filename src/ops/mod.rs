//! What an operator asks of the fleet and does to it, once, for the command
//! line and the dashboard alike: both only parse what they are given and
//! render what they get back. It reads the fleet's rows (leases, pauses,
//! replicas, history) and acts on them; it knows nothing of text, JSON or
//! HTML.

pub(crate) mod actions;
pub(crate) mod fleet;
pub(crate) mod output;
pub(crate) mod verify;

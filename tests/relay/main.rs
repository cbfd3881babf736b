//! Integration tests of `hearth-relay`: the real binary, driven through the native client
//! (`hearth::relay::client`) and raw WebSockets, in one test crate.

mod crash;
mod harness;
mod listens;
mod model;
mod ops;
mod queries;
mod robustness;
mod writes;

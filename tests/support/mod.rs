//! Test harness: in-process fake upstreams (hyper, or raw TCP for faults), raw TCP clients and a
//! proxy, all on 127.0.0.1:0.

#![allow(dead_code)]

pub mod balancer;
pub mod cli;
pub mod closed_port;
pub mod log_capture;
pub mod memory;
pub mod metrics;
pub mod minting_provider;
pub mod pki;
pub mod proxy;
pub mod raw;
pub mod redis_ha;
pub mod redis_server;
pub mod scripted_provider;
pub mod serve;
pub mod slow_relay;
pub mod upstream;

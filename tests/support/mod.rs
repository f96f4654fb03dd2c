//! Test harness: an in-process fake upstream and a proxy, both on 127.0.0.1:0.

#![allow(dead_code)]

pub mod proxy;
pub mod upstream;

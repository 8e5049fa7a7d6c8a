//! Integration tests: every test starts the real `mnemo` binary on port 0 with a temporary data
//! directory and talks to it over HTTP on loopback, exactly as a client would.

mod harness;

mod as_of;
mod auth;
mod bad_input;
mod cli;
mod context;
mod crash;
mod cross_site;
mod crud;
mod entities;
mod extraction;
mod faults;
mod hostile;
mod https;
mod lifecycle;
mod llm;
mod mcp;
mod openapi;
mod pki;
mod postgres;
mod privacy;
mod qa;
mod real_llm;
mod recovery;
mod replicas;
mod retrieval;
mod scopes;
mod served_model;
mod setup_model;
mod strict_input;
mod webhooks;
mod write_path;

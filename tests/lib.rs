//! Integration tests: one binary, one module per area.
mod accuracy;
mod cli;
mod client;
mod common;
mod compare;
mod interrupt;
mod report;
mod reproduce;
mod run;
mod sim;
mod spec;
mod spec_corpus;
mod ssh;
mod ssh_run;
mod sshd;
mod statistics;
mod summary;

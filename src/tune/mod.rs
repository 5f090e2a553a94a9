//! The autotuner front end: search spaces built by constraint propagation ([`space`]), the
//! occupancy model ([`occupancy`]), and `metafork tune`'s enumeration and ranking of program
//! parameters for a device ([`rank`]), the check that a point keeps the program's host arithmetic
//! defined ([`overflow`]), the configurations whose grid truncates a division ([`coverage`]), the timing harness ([`harness`]) and the command
//! itself ([`command`]).

pub mod space;
pub mod occupancy;
pub mod rank;
pub mod command;
pub mod harness;
pub mod overflow;
pub mod coverage;

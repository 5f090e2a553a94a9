//! The autotuner front end: search spaces built by constraint propagation ([`space`]), the
//! occupancy model ([`occupancy`]), and `metafork tune`'s enumeration and ranking of program
//! parameters for a device ([`rank`]).

pub mod space;

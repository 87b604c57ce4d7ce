//! One module per subcommand of `issuer`: its arguments and what it does.

pub mod apply;
pub mod audit;
pub mod backup;
pub mod client;
pub mod directory;
pub mod dpop;
pub mod edges;
pub mod keys;
pub mod serve;
pub mod user;
pub mod vendor;

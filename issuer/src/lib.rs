//! The token issuer of the media management service.
//!
//! - [`http`]: routes and the rendering of every answer; [`app`]: what each endpoint does.
//! - [`store`]: the state behind one narrow interface (clients, users, keys, refresh token
//!   families), on redb or PostgreSQL.
//! - [`admin`]: the administrative commands, run directly or through the server's Unix socket.
//! - [`audit`]: recording the audit trail, and the names of its actors.
//! - [`config`]: the configuration file of `issuer serve` and its `[directory]` table.
//! - [`directory`]: sign-in of users from Active Directory or another LDAP directory.
//! - [`display`]: untrusted text made safe to print (line separators, bidi controls escaped).
//! - [`vendor`]: vendors' software statements and revocation lists (RFC 7591), signed and checked.
//! - [`server`]: the accept loop (plain or TLS), admin socket, sweep and graceful shutdown.
#![forbid(unsafe_code)]

pub mod admin;
pub mod app;
pub mod audit;
pub mod config;
pub mod directory;
pub mod display;
pub mod http;
pub mod logging;
pub mod metrics;
pub mod passwords;
pub mod secret_file;
pub mod secrets;
pub mod server;
pub mod store;
pub mod throttle;
pub mod tls_client;
pub mod vendor;

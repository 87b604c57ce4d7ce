//! User passwords: Argon2id hashing and verification, run on the blocking pool with bounded
//! concurrency so a burst of sign-ins cannot starve the async runtime or exhaust memory.
//!
//! Each check needs Argon2's working memory (19 MiB with the parameters below). A checker keeps
//! one buffer per permitted concurrent check and reuses it, wiped after every use, so the memory
//! for password checks is a fixed `concurrency` × 19 MiB instead of whatever the allocator keeps
//! of a fresh 19 MiB allocation per check in every thread that ever ran one.
//!
//! Users moved in from another server may hold a bcrypt or PBKDF2 hash ([`schemes`]): those are
//! checked under the same bound, and a right password gets its Argon2id hash made there too, in
//! the same buffer, for the caller to store in place of the old one ([`Checked::Upgrade`]).

use argon2::password_hash::{PasswordHash, PasswordHasher, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use std::sync::{Arc, Mutex, PoisonError};
use subtle::ConstantTimeEq;
use tokio::sync::Semaphore;
use zeroize::{Zeroize, Zeroizing};

pub mod schemes;
pub use schemes::{check_hash, HashError, PasswordScheme};

/// Argon2id with the OWASP baseline: 19 MiB, 2 passes, 1 lane.
fn params() -> Params {
    Params::new(19 * 1024, 2, 1, None).expect("valid Argon2 parameters")
}

/// Hashes a password into a PHC string.
pub fn hash_password(password: &str) -> String {
    let salt = SaltString::encode_b64(&crate::secrets::random16()).expect("16-byte salt encodes");
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params())
        .hash_password(password.as_bytes(), &salt)
        .expect("Argon2 hashing with valid parameters")
        .to_string()
}

/// True if `password` matches the PHC string `hash`; false for a damaged hash too.
pub fn verify_password(password: &str, hash: &str) -> bool {
    let mut memory = Vec::new();
    verify_with(password, hash, &mut memory)
}

/// [`verify_password`] with Argon2's working memory in `memory`, grown if the hash asks for more
/// and wiped before returning.
fn verify_with(password: &str, hash: &str, memory: &mut Vec<Block>) -> bool {
    let Ok(h) = PasswordHash::new(hash) else {
        return false;
    };
    let (Ok(algorithm), Ok(params)) = (Algorithm::try_from(h.algorithm), Params::try_from(&h))
    else {
        return false;
    };
    let version = match h.version.map(Version::try_from) {
        None => Version::V0x13,
        Some(Ok(v)) => v,
        Some(Err(_)) => return false,
    };
    let (Some(salt), Some(expected)) = (h.salt, h.hash) else {
        return false;
    };
    let mut salt_bytes = [0u8; 64];
    let Ok(salt) = salt.decode_b64(&mut salt_bytes) else {
        return false;
    };
    let blocks = params.block_count();
    if memory.len() < blocks {
        memory.resize(blocks, Block::default());
    }
    let mut out = Zeroizing::new(vec![0u8; expected.len()]);
    let hashed = Argon2::new(algorithm, version, params).hash_password_into_with_memory(
        password.as_bytes(),
        salt,
        &mut out,
        &mut memory[..blocks],
    );
    memory[..blocks].iter_mut().for_each(Zeroize::zeroize);
    hashed.is_ok() && bool::from(out.ct_eq(expected.as_bytes()))
}

/// Hashes `password` with Argon2id in `memory` (grown if needed, wiped after) into a PHC string.
fn hash_with(password: &str, memory: &mut Vec<Block>) -> Option<String> {
    use argon2::password_hash::{Output, ParamsString};
    let params = params();
    let salt = SaltString::encode_b64(&crate::secrets::random16()).ok()?;
    let mut salt_bytes = [0u8; 16];
    let salt_raw = salt.decode_b64(&mut salt_bytes).ok()?;
    let blocks = params.block_count();
    if memory.len() < blocks {
        memory.resize(blocks, Block::default());
    }
    let mut out = Zeroizing::new([0u8; 32]);
    let hashed = Argon2::new(Algorithm::Argon2id, Version::V0x13, params.clone())
        .hash_password_into_with_memory(
            password.as_bytes(),
            salt_raw,
            &mut *out,
            &mut memory[..blocks],
        );
    memory[..blocks].iter_mut().for_each(Zeroize::zeroize);
    hashed.ok()?;
    let phc = PasswordHash {
        algorithm: Algorithm::Argon2id.ident(),
        version: Some(Version::V0x13.into()),
        params: ParamsString::try_from(&params).ok()?,
        salt: Some(salt.as_salt()),
        hash: Some(Output::new(&*out).ok()?),
    };
    Some(phc.to_string())
}

/// What a password check found.
#[derive(Debug, PartialEq, Eq)]
pub enum Checked {
    /// Wrong password, unknown user, or a user without a usable hash.
    Wrong,
    /// Right password.
    Right,
    /// Right password against a bcrypt or PBKDF2 hash: its Argon2id hash, to store instead.
    Upgrade(String),
}

impl Checked {
    /// True for a right password.
    pub fn is_right(&self) -> bool {
        !matches!(self, Self::Wrong)
    }
}

/// Checks `password` against `hash` of whichever scheme, in `memory`; a user without a hash of a
/// known scheme (none set) is checked against `dummy`, for the same work, and is wrong.
fn check_with(password: &str, hash: &str, dummy: &str, memory: &mut Vec<Block>) -> Checked {
    let checked = check_any(password, hash, dummy, memory);
    // An imported Argon2id hash may take more memory than ours: the pooled buffer goes back to
    // this server's size, so the pool stays `concurrency` × 19 MiB.
    let ours = params().block_count();
    if memory.len() > ours {
        memory.truncate(ours);
        memory.shrink_to_fit();
    }
    checked
}

/// The PHC prefix of this server's Argon2id hashes ([`params`]).
const OUR_ARGON2: &str = "$argon2id$v=19$m=19456,t=2,p=1$";

fn check_any(password: &str, hash: &str, dummy: &str, memory: &mut Vec<Block>) -> Checked {
    match PasswordScheme::of(hash) {
        Some(PasswordScheme::Argon2id) if verify_with(password, hash, memory) => {
            if hash.starts_with(OUR_ARGON2) {
                Checked::Right
            } else {
                // Imported with other parameters: made again with ours.
                hash_with(password, memory).map_or(Checked::Right, Checked::Upgrade)
            }
        }
        Some(PasswordScheme::Bcrypt | PasswordScheme::Pbkdf2Sha256)
            if schemes::verify_imported(password, hash) =>
        {
            hash_with(password, memory).map_or(Checked::Right, Checked::Upgrade)
        }
        None => {
            verify_with(password, dummy, memory);
            Checked::Wrong
        }
        Some(_) => Checked::Wrong,
    }
}

/// Verifies passwords off the runtime, at most `concurrency` at a time, each in a reused buffer.
#[derive(Clone)]
pub struct PasswordChecker {
    permits: Arc<Semaphore>,
    /// Argon2 buffers not in use; at most one per permit ever exists.
    buffers: Arc<Mutex<Vec<Vec<Block>>>>,
    /// Hash checked for unknown users so they cost the same as known ones.
    dummy: Arc<String>,
    /// Checks done.
    done: prometheus_client::metrics::counter::Counter,
    /// A moving average of one check's time, in seconds ([`PasswordChecker::typical`]).
    typical: Typical,
}

/// The moving average of a password check's time, in seconds.
type Typical = prometheus_client::metrics::gauge::Gauge<f64, std::sync::atomic::AtomicU64>;

/// Weight of the newest check in [`PasswordChecker::typical`].
const TYPICAL_WEIGHT: f64 = 0.125;

impl PasswordChecker {
    /// A checker allowing `concurrency` simultaneous verifications.
    pub fn new(concurrency: usize) -> Self {
        let started = std::time::Instant::now();
        let dummy = Arc::new(hash_password("unknown user placeholder"));
        let typical = Typical::default();
        typical.set(started.elapsed().as_secs_f64());
        Self {
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
            buffers: Arc::default(),
            dummy,
            done: Default::default(),
            typical,
        }
    }

    /// The checker, counting its checks in `done` and keeping its typical time in `typical`.
    pub fn counting(
        self,
        done: prometheus_client::metrics::counter::Counter,
        typical: Typical,
    ) -> Self {
        typical.set(self.typical.get());
        Self {
            done,
            typical,
            ..self
        }
    }

    /// How long one check typically takes (a moving average, first the placeholder's hashing):
    /// what a refusal that needed no check waits for, so that its time tells nothing.
    pub fn typical(&self) -> std::time::Duration {
        std::time::Duration::try_from_secs_f64(self.typical.get()).unwrap_or_default()
    }

    /// Checks `password` against `hash` of any [`PasswordScheme`], or against a placeholder when
    /// `hash` is `None` or names none (the answer is then [`Checked::Wrong`], after the same
    /// work).
    pub async fn check(&self, password: Zeroizing<String>, hash: Option<String>) -> Checked {
        // The permit goes with the work: a request dropped while its check runs does not free a
        // place for another check (and another buffer) before this one ends.
        let Ok(permit) = self.permits.clone().acquire_owned().await else {
            return Checked::Wrong;
        };
        let known = hash.is_some();
        let hash = hash.unwrap_or_else(|| self.dummy.as_ref().clone());
        let dummy = self.dummy.clone();
        let buffers = self.buffers.clone();
        let checked = tokio::task::spawn_blocking(move || {
            let started = std::time::Instant::now();
            let mut memory = buffers
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop()
                .unwrap_or_default();
            let checked = check_with(&password, &hash, &dummy, &mut memory);
            buffers
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(memory);
            drop(permit);
            (checked, started.elapsed())
        })
        .await
        .unwrap_or((Checked::Wrong, std::time::Duration::ZERO));
        let (checked, took) = checked;
        self.done.inc();
        if !took.is_zero() {
            let before = self.typical.get();
            let now = before + TYPICAL_WEIGHT * (took.as_secs_f64() - before);
            self.typical.set(now);
        }
        if known {
            checked
        } else {
            Checked::Wrong
        }
    }

    /// Buffers allocated so far (at most the concurrency).
    pub fn buffers(&self) -> usize {
        self.buffers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_and_verify() {
        let h = hash_password("correct horse");
        assert!(h.starts_with(OUR_ARGON2), "{h}");
        assert!(verify_password("correct horse", &h));
        assert!(!verify_password("wrong", &h));
        assert!(!verify_password("x", "not a phc string"));
        // Altered hashes and parameters do not verify.
        let altered = h.replace("$argon2id$", "$argon2i$");
        assert!(!verify_password("correct horse", &altered));
        let mut bytes = h.clone().into_bytes();
        let last = bytes.len() - 2;
        bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
        assert!(!verify_password(
            "correct horse",
            &String::from_utf8(bytes).unwrap()
        ));
    }

    #[test]
    fn hashes_made_by_the_argon2_crate_itself_verify() {
        use argon2::password_hash::PasswordVerifier;
        let salt = SaltString::encode_b64(b"0123456789abcdef").unwrap();
        let other = Params::new(8 * 1024, 3, 1, Some(24)).unwrap();
        let h = Argon2::new(Algorithm::Argon2id, Version::V0x13, other)
            .hash_password(b"pw", &salt)
            .unwrap()
            .to_string();
        assert!(
            verify_password("pw", &h),
            "other parameters and output length"
        );
        assert!(Argon2::default()
            .verify_password(b"pw", &PasswordHash::new(&h).unwrap())
            .is_ok());
    }

    #[tokio::test]
    async fn the_checker_reuses_one_buffer_per_permit() {
        let checker = PasswordChecker::new(2);
        let h = hash_password("pw");
        for _ in 0..4 {
            let (a, b) = tokio::join!(
                checker.check(Zeroizing::new("pw".into()), Some(h.clone())),
                checker.check(Zeroizing::new("no".into()), Some(h.clone()))
            );
            assert_eq!((a, b), (Checked::Right, Checked::Wrong));
        }
        let none = checker.check(Zeroizing::new("pw".into()), None).await;
        assert_eq!(none, Checked::Wrong);
        let empty = checker.check(Zeroizing::new("".into()), Some(String::new()));
        assert_eq!(empty.await, Checked::Wrong, "a user without a password");
        assert!((1..=2).contains(&checker.buffers()));
    }

    #[tokio::test]
    async fn imported_hashes_are_upgraded_to_argon2id_when_right() {
        let checker = PasswordChecker::new(1);
        let bcrypt = bcrypt::hash("pw", 10).unwrap();
        let pw = || Zeroizing::new("pw".to_owned());
        assert_eq!(
            checker
                .check(Zeroizing::new("no".into()), Some(bcrypt.clone()))
                .await,
            Checked::Wrong
        );
        let Checked::Upgrade(new) = checker.check(pw(), Some(bcrypt)).await else {
            panic!("not upgraded");
        };
        assert_eq!(check_hash(&new), Ok(PasswordScheme::Argon2id));
        assert!(verify_password("pw", &new) && !verify_password("no", &new));
        assert_eq!(checker.check(pw(), Some(new)).await, Checked::Right);
        assert_eq!(checker.buffers(), 1);
    }

    #[test]
    fn an_argon2id_hash_of_other_parameters_is_upgraded_and_its_memory_given_back() {
        let salt = SaltString::encode_b64(&[9; 16]).unwrap();
        let theirs = Argon2::new(
            Algorithm::Argon2id,
            Version::V0x13,
            Params::new(32 * 1024, 3, 1, None).unwrap(),
        )
        .hash_password(b"pw", &salt)
        .unwrap()
        .to_string();
        assert_eq!(check_hash(&theirs), Ok(PasswordScheme::Argon2id));
        let mut memory = Vec::new();
        let dummy = hash_password("dummy");
        let Checked::Upgrade(ours) = check_with("pw", &theirs, &dummy, &mut memory) else {
            panic!("not upgraded");
        };
        assert!(ours.starts_with(OUR_ARGON2) && verify_password("pw", &ours));
        assert_eq!(memory.len(), params().block_count(), "back to 19 MiB");
        assert_eq!(
            check_with("no", &theirs, &dummy, &mut memory),
            Checked::Wrong
        );
        assert_eq!(check_with("pw", &ours, &dummy, &mut memory), Checked::Right);
    }
}

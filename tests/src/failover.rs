//! Refresh load across a database failover, shared by the e2e test and `cargo xtask bench
//! --failover`: clients rotating refresh tokens at token endpoints while the database behind
//! them dies and its standby takes over, every answer recorded with its time ([`Answer`]), so
//! that what the clients were told can be held against what the store keeps.
//!
//! A family is refreshed by one client, or by several in lockstep: each round they all present
//! the same token at once and must all get the same successor (the losers of the race on the
//! row get the winner's rotation as a retry inside the window). A client answered 503 presents
//! the same token again after a pause, until it gets an answer that is not a 503; so once the
//! load stops, every family's last answer was a rotation and the store's generation of the family
//! must be exactly the last successor a client got.

use anyhow::{bail, Context, Result};
use base64::Engine as _;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a client answered 503 waits before it presents its token again.
const PAUSE: Duration = Duration::from_millis(100);
/// The refresh token's prefix (`issuer/src/secrets.rs`).
const PREFIX: &str = "mmrt2.";

/// A refresh token's family (hex of its 16-byte id) and generation, read from the token itself.
pub fn family_of(token: &str) -> Option<(String, u32)> {
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.strip_prefix(PREFIX)?)
        .ok()?;
    let family = raw.get(..16)?.iter().map(|b| format!("{b:02x}")).collect();
    let generation = u32::from_be_bytes(raw.get(16..20)?.try_into().ok()?);
    Some((family, generation))
}

/// The HTTP client of [`Target`].
pub type Http = reqwest::Client;

/// A plain HTTP client (no proxy from the environment), for issuers reached directly.
pub fn http_client() -> Result<Http> {
    Ok(reqwest::Client::builder().no_proxy().build()?)
}

/// What one refresh was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// 200: the successor's generation.
    Rotated(u32),
    /// 400, with the OAuth error code.
    Refused(String),
    /// 503, and whether it carried `Retry-After`.
    Unavailable { retry_after: bool },
    /// Any other status, with the body.
    Other(u16, String),
    /// No answer at all.
    Transport(String),
}

/// One refresh and its answer.
#[derive(Debug, Clone)]
pub struct Answer {
    /// When the request was sent.
    pub at: Instant,
    /// How long the answer took.
    pub latency: Duration,
    /// The family (hex id) and the generation presented.
    pub family: String,
    pub presented: u32,
    pub outcome: Outcome,
}

/// Clients refreshing, until [`Load::finish`].
pub struct Load {
    answers: Arc<Mutex<Vec<Answer>>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Result<String>>>,
}

/// What every client shares: the HTTP client, the token endpoints (client `i` of family `f` uses
/// endpoint `(f + i) % len`, so families and racers spread over them), the OAuth client's id and
/// secret.
#[derive(Clone)]
pub struct Target {
    pub http: reqwest::Client,
    pub token_urls: Vec<String>,
    pub client_id: String,
    pub secret: String,
}

impl Target {
    /// One refresh of `token` at endpoint `url`, recorded: the successor on a 200, else whether
    /// the answer was a 503.
    async fn refresh(
        &self,
        url: &str,
        token: &str,
        log: &Mutex<Vec<Answer>>,
    ) -> Result<String, bool> {
        let (family, presented) = family_of(token).unwrap_or_default();
        let at = Instant::now();
        let sent = self
            .http
            .post(url)
            .basic_auth(&self.client_id, Some(&self.secret))
            .form(&[("grant_type", "refresh_token"), ("refresh_token", token)])
            .send()
            .await;
        let (outcome, successor) = match sent {
            Err(e) => (Outcome::Transport(e.to_string()), None),
            Ok(r) => {
                let status = r.status().as_u16();
                let retry_after = r.headers().contains_key("retry-after");
                let body: serde_json::Value = r.json().await.unwrap_or_default();
                match status {
                    200 => match body["refresh_token"].as_str().and_then(family_of) {
                        Some((_, next)) => (
                            Outcome::Rotated(next),
                            body["refresh_token"].as_str().map(str::to_owned),
                        ),
                        None => (Outcome::Other(200, body.to_string()), None),
                    },
                    400 => (Outcome::Refused(body["error"].to_string()), None),
                    503 => (Outcome::Unavailable { retry_after }, None),
                    other => (Outcome::Other(other, body.to_string()), None),
                }
            }
        };
        let unavailable = matches!(outcome, Outcome::Unavailable { .. });
        let answer = Answer {
            at,
            latency: at.elapsed(),
            family,
            presented,
            outcome,
        };
        log.lock().expect("the answer log").push(answer);
        successor.ok_or(unavailable)
    }

    /// Presents `token` until the answer is not a 503 (or `stop_by` passes): the successor, or
    /// `None` for any other answer.
    async fn rotate(
        &self,
        url: &str,
        token: &str,
        log: &Mutex<Vec<Answer>>,
        stop_by: Instant,
    ) -> Option<String> {
        loop {
            match self.refresh(url, token, log).await {
                Ok(next) => return Some(next),
                Err(true) if Instant::now() < stop_by => tokio::time::sleep(PAUSE).await,
                Err(_) => return None,
            }
        }
    }
}

impl Load {
    /// Starts refreshing each family of `families` (its first refresh token, and how many
    /// clients refresh it in lockstep), until [`Load::finish`]; gives up on a family at `stop_by`.
    pub fn start(target: &Target, families: Vec<(String, usize)>, stop_by: Instant) -> Load {
        let answers = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for (f, (first, clients)) in families.into_iter().enumerate() {
            let (target, log, stop) = (target.clone(), answers.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                let mut token = first;
                while !stop.load(Ordering::Relaxed) {
                    let urls = &target.token_urls;
                    let round = (0..clients.max(1)).map(|i| {
                        let url = &urls[(f + i) % urls.len()];
                        target.rotate(url, &token, &log, stop_by)
                    });
                    let answers = futures_util::future::join_all(round).await;
                    let mut got: Vec<&String> = answers.iter().flatten().collect();
                    let everyone = got.len() == answers.len();
                    got.dedup();
                    if got.len() > 1 {
                        bail!("a fork of family {:?}: {answers:?}", family_of(&token));
                    }
                    // Refused (or no answer): this family's clients stop, holding their token.
                    let (Some(next), true) = (got.first(), everyone) else {
                        break;
                    };
                    token = next.to_string();
                }
                Ok(token)
            }));
        }
        Load {
            answers,
            stop,
            tasks,
        }
    }

    /// The answers so far.
    pub fn answers(&self) -> Vec<Answer> {
        self.answers.lock().expect("the answer log").clone()
    }

    /// Stops the clients (each after its round) and returns every answer and each family's
    /// last refresh token, or the first client's failure.
    pub async fn finish(self) -> Result<(Vec<Answer>, Vec<String>)> {
        self.stop.store(true, Ordering::Relaxed);
        let mut last = Vec::new();
        for t in self.tasks {
            last.push(t.await.context("a client panicked")??);
        }
        let answers = self.answers.lock().expect("the answer log").clone();
        Ok((answers, last))
    }
}

/// The highest generation a client was handed for each family, by answers received before
/// `until`.
pub fn acknowledged(answers: &[Answer], until: Instant) -> HashMap<String, u32> {
    let mut acked: HashMap<String, u32> = HashMap::new();
    for a in answers.iter().filter(|a| a.at + a.latency < until) {
        if let Outcome::Rotated(g) = a.outcome {
            let e = acked.entry(a.family.clone()).or_default();
            *e = (*e).max(g);
        }
    }
    acked
}

/// A family as the store holds it: its generation and whether it was revoked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    pub generation: u32,
    pub revoked: bool,
}

/// Every family in the PostgreSQL store of `pg` (`refresh_family_records`), read with SQL.
pub fn stored_families(pg: &crate::postgres::PgCluster) -> Result<HashMap<String, Stored>> {
    let rows = pg.psql(
        "SELECT encode(id, 'hex') || ' ' || generation || ' ' || (revoked_at IS NOT NULL) \
         FROM refresh_family_records",
    )?;
    rows.lines()
        .map(|l| {
            let mut f = l.split(' ');
            let (Some(id), Some(g), Some(r)) = (f.next(), f.next(), f.next()) else {
                bail!("a row of refresh_family_records: {l:?}");
            };
            let stored = Stored {
                generation: g.parse().with_context(|| format!("generation {g:?}"))?,
                revoked: r == "t",
            };
            Ok((id.to_owned(), stored))
        })
        .collect()
}

/// The families whose acknowledged rotations the store lacks: (family, acknowledged
/// generation, stored generation or `None` for no record), sorted.
pub fn missing(
    acked: &HashMap<String, u32>,
    stored: &HashMap<String, Stored>,
) -> Vec<(String, u32, Option<u32>)> {
    let mut out: Vec<_> = acked
        .iter()
        .filter_map(|(f, g)| {
            let have = stored.get(f).map(|s| s.generation);
            (have.is_none_or(|h| h < *g)).then(|| (f.clone(), *g, have))
        })
        .collect();
    out.sort();
    out
}

/// Acknowledged rotations the store lacks, summed over families.
pub fn rotations_lost(acked: &HashMap<String, u32>, stored: &HashMap<String, Stored>) -> u64 {
    missing(acked, stored)
        .iter()
        .map(|(_, g, have)| u64::from(g - have.unwrap_or(0)))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(family: [u8; 16], generation: u32) -> String {
        let mut raw = family.to_vec();
        raw.extend(generation.to_be_bytes());
        raw.extend([7u8; 32]);
        format!(
            "{PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
        )
    }

    fn answer(at: Instant, family: &str, presented: u32, outcome: Outcome) -> Answer {
        Answer {
            at,
            latency: Duration::from_millis(10),
            family: family.into(),
            presented,
            outcome,
        }
    }

    #[test]
    fn a_token_names_its_family_and_generation() {
        let t = token([0xab; 16], 258);
        assert_eq!(family_of(&t), Some(("ab".repeat(16), 258)));
        assert_eq!(family_of("mmrt1.AAAA"), None);
        assert_eq!(family_of(&format!("{PREFIX}AAAA")), None);
    }

    #[test]
    fn only_rotations_answered_before_the_instant_count_and_missing_ones_are_summed() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(1);
        let answers = [
            answer(t0, "a", 0, Outcome::Rotated(1)),
            answer(t0, "a", 1, Outcome::Rotated(2)),
            answer(t0, "b", 4, Outcome::Unavailable { retry_after: true }),
            answer(t0, "c", 0, Outcome::Rotated(1)),
            answer(later, "c", 1, Outcome::Rotated(2)),
        ];
        let acked = acknowledged(&answers, t0 + Duration::from_millis(500));
        assert_eq!(acked, HashMap::from([("a".into(), 2), ("c".into(), 1)]));
        let stored = HashMap::from([(
            "c".to_owned(),
            Stored {
                generation: 1,
                revoked: false,
            },
        )]);
        assert_eq!(missing(&acked, &stored), vec![("a".into(), 2, None)]);
        assert_eq!(rotations_lost(&acked, &stored), 2);
        let behind = HashMap::from([("a".into(), 5), ("c".into(), 1)]);
        let mut stored = stored;
        stored.insert(
            "a".into(),
            Stored {
                generation: 3,
                revoked: false,
            },
        );
        assert_eq!(missing(&behind, &stored), vec![("a".into(), 5, Some(3))]);
        assert_eq!(rotations_lost(&behind, &stored), 2);
    }
}

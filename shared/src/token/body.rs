//! The binary token body: the fields in a fixed order, strings length-prefixed, each field checked
//! by its rule in [`crate::rules`] the same way when minting and when decoding. Layout:
//! `docs/token-format.md`.

use super::chain::{chain_ok, encode_chain, CHAIN_SECTION};
use super::MAX_ITEMS;
use super::{Chain, Claim, Identity, MintError, SubjectKind, TokenBody, JKT_LEN, MAX_CHAIN_DEPTH};
use crate::rules::{claim_type_ok, claim_value_ok, name_ok, role_ok, subject_ok};

pub(super) fn identity_ok(id: &Identity) -> Result<(), MintError> {
    if !subject_ok(&id.subject) {
        return Err(MintError::InvalidField("subject"));
    }
    if id.roles.len() > MAX_ITEMS || id.claims.len() > MAX_ITEMS {
        return Err(MintError::TooManyItems);
    }
    if !id.roles.iter().all(|r| role_ok(r)) {
        return Err(MintError::InvalidField("role"));
    }
    for c in &id.claims {
        if !claim_type_ok(&c.typ) || !claim_value_ok(&c.value) {
            return Err(MintError::InvalidField("claim"));
        }
    }
    if consistent(id) {
        Ok(())
    } else {
        Err(MintError::InconsistentIdentity)
    }
}

/// Whether the identity's parts fit its kind (a user has a subject, a client has nothing else).
fn consistent(id: &Identity) -> bool {
    match id.kind {
        SubjectKind::User => !id.subject.is_empty(),
        SubjectKind::Client => id.subject.is_empty() && id.roles.is_empty() && id.claims.is_empty(),
        SubjectKind::Impersonation => {
            !id.subject.is_empty() || !id.roles.is_empty() || !id.claims.is_empty()
        }
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    // Lengths were checked against MAX_FIELD_LEN (255) before encoding.
    out.push(s.len() as u8);
    out.extend_from_slice(s.as_bytes());
}

pub(super) fn encode_body(body: &TokenBody) -> Vec<u8> {
    let id = &body.identity;
    let mut out = Vec::with_capacity(64 + body.client.len() + id.subject.len());
    out.extend_from_slice(&body.kid.to_be_bytes());
    out.extend_from_slice(&body.jti);
    out.extend_from_slice(&body.iat.to_be_bytes());
    out.extend_from_slice(&body.exp.to_be_bytes());
    out.push(id.kind.to_byte());
    put_str(&mut out, &body.client);
    put_str(&mut out, &id.subject);
    out.push(id.roles.len() as u8);
    for r in &id.roles {
        put_str(&mut out, r);
    }
    out.push(id.claims.len() as u8);
    for c in &id.claims {
        put_str(&mut out, &c.typ);
        put_str(&mut out, &c.value);
    }
    if let Some(chain) = &body.act {
        encode_chain(&mut out, chain);
    }
    if let Some(jkt) = &body.cnf {
        out.extend_from_slice(jkt);
    }
    out
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    /// A length-prefixed string that meets `rule`.
    fn str(&mut self, rule: fn(&str) -> bool) -> Option<String> {
        let len = usize::from(self.u8()?);
        let s = core::str::from_utf8(self.take(len)?).ok()?;
        rule(s).then(|| s.to_owned())
    }

    /// The chain section, its opening byte read: the origin, a count of 1 to
    /// [`MAX_CHAIN_DEPTH`] (checked before any actor is read), the actors.
    fn chain(&mut self) -> Option<Chain> {
        let origin = self.str(name_ok)?;
        let n = usize::from(self.u8()?);
        if n == 0 || n > MAX_CHAIN_DEPTH {
            return None;
        }
        let actors = (0..n)
            .map(|_| self.str(name_ok))
            .collect::<Option<Vec<_>>>()?;
        Some(Chain { origin, actors })
    }
}

/// Decodes a body; `bound` (an `mmat2` token) means it ends with the 32-byte confirmation, which
/// follows everything else, the chain section included.
pub(super) fn decode_body(raw: &[u8], bound: bool) -> Option<TokenBody> {
    let (raw, cnf) = if bound {
        let (head, jkt) = raw.split_at_checked(raw.len().checked_sub(JKT_LEN)?)?;
        (head, Some(jkt.try_into().ok()?))
    } else {
        (raw, None)
    };
    let mut r = Reader(raw);
    let kid = u32::from_be_bytes(r.array()?);
    let jti = r.array()?;
    let iat = u64::from_be_bytes(r.array()?);
    let exp = u64::from_be_bytes(r.array()?);
    let kind = SubjectKind::from_byte(r.u8()?)?;
    let client = r.str(name_ok)?;
    let subject = r.str(subject_ok)?;
    let n_roles = usize::from(r.u8()?);
    if n_roles > MAX_ITEMS {
        return None;
    }
    let roles = (0..n_roles)
        .map(|_| r.str(role_ok))
        .collect::<Option<Vec<_>>>()?;
    let n_claims = usize::from(r.u8()?);
    if n_claims > MAX_ITEMS {
        return None;
    }
    let claims = (0..n_claims)
        .map(|_| {
            Some(Claim {
                typ: r.str(claim_type_ok)?,
                value: r.str(claim_value_ok)?,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    let act = match r.u8() {
        None => None,
        Some(CHAIN_SECTION) => Some(r.chain()?),
        Some(_) => return None,
    };
    if !r.0.is_empty() || exp < iat {
        return None;
    }
    let identity = Identity {
        kind,
        subject,
        roles,
        claims,
    };
    // Each field met its rule as it was read; what is left is how they fit together.
    if !consistent(&identity) || act.as_ref().is_some_and(|c| chain_ok(c, &client).is_err()) {
        return None;
    }
    Some(TokenBody {
        kid,
        jti,
        iat,
        exp,
        client,
        identity,
        cnf,
        act,
    })
}

//! What the directory is asked, on a service-account connection: the entry the user filter finds
//! for a name (every value put into a filter escaped per RFC 4515), whether the account is
//! disabled, the groups it is in (nested ones included) and the attributes its claims come from.
//! No DN is ever built from input: binds and group queries use the DN the server returned.
//! Referrals and continuation references are never followed.

use crate::config::{DirectoryConfig, DirectoryKind};
use ldap3::{ldap_escape, Ldap, LdapError, Scope, SearchEntry, SearchOptions, SearchResult};
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// `LDAP_MATCHING_RULE_IN_CHAIN`: Active Directory's transitive membership match.
pub const IN_CHAIN: &str = "1.2.840.113556.1.4.1941";
/// `userAccountControl` bit of a disabled account.
const ACCOUNTDISABLE: u32 = 0x2;
/// `pwdAccountLockedTime` of an account locked until an administrator unlocks it.
const LOCKED_FOR_GOOD: &str = "000001010000Z";
/// How deep nested `memberOf` is followed on a plain LDAP server, and how many groups at most.
const MAX_GROUP_DEPTH: usize = 8;
const MAX_GROUPS: usize = 512;

/// The one entry a name found.
#[derive(Debug, Clone)]
pub struct Entry {
    pub dn: String,
    attrs: HashMap<String, Vec<String>>,
    /// Values that are not UTF-8 (Active Directory's `objectGUID`).
    bin_attrs: HashMap<String, Vec<Vec<u8>>>,
}

/// What a search for a name found.
#[derive(Debug)]
pub enum Found {
    One(Entry),
    None,
    /// More than one entry: refused, whichever the user meant.
    Many,
}

impl Entry {
    /// The first value of `attr` (attribute names compare without case).
    pub fn first(&self, attr: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(attr))
            .and_then(|(_, v)| v.first())
            .map(String::as_str)
    }

    /// The user's one name in the issuer: the first value of `name_attribute`, if it is a name
    /// the issuer and its tokens can carry.
    pub fn name(&self, config: &DirectoryConfig) -> Option<&str> {
        self.first(&config.name_attribute)
            .filter(|n| shared::rules::user_name_ok(n))
    }

    /// What identifies the entry for good: `id_attribute`'s value (a binary one, such as
    /// `objectGUID`, in hex), or the normalised DN when the service account cannot read it.
    pub fn key(&self, config: &DirectoryConfig) -> String {
        let attr = config.id_attribute.as_str();
        let binary = self
            .bin_attrs
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(attr))
            .and_then(|(_, v)| v.first());
        match (binary, self.first(attr)) {
            (Some(bytes), _) => format!("id:{}", hex::encode(bytes)),
            // A GUID whose bytes happen to be UTF-8 arrives as text: the same bytes.
            (None, Some(text)) if attr.eq_ignore_ascii_case("objectGUID") => {
                format!("id:{}", hex::encode(text.as_bytes()))
            }
            (None, Some(text)) => format!("id:{}", text.to_ascii_lowercase()),
            (None, None) => format!("dn:{}", normal_dn(&self.dn)),
        }
    }

    fn all<'a>(&'a self, attr: &'a str) -> impl Iterator<Item = &'a String> {
        self.attrs
            .iter()
            .filter(move |(k, _)| k.eq_ignore_ascii_case(attr))
            .flat_map(|(_, v)| v)
    }

    /// Whether the account is disabled: AD's `userAccountControl`, or the password policy
    /// overlay's `pwdAccountLockedTime` of a lock for good on an LDAP server.
    pub fn disabled(&self, kind: DirectoryKind) -> bool {
        match kind {
            DirectoryKind::ActiveDirectory => self
                .first("userAccountControl")
                .and_then(|v| v.trim().parse::<u32>().ok())
                .is_some_and(|uac| uac & ACCOUNTDISABLE != 0),
            // Locked for good by an administrator; a lock-out of the password policy that runs
            // out is left to the bind, which the server refuses while it lasts.
            DirectoryKind::Ldap => self.first("pwdAccountLockedTime") == Some(LOCKED_FOR_GOOD),
        }
    }

    /// The claims of `[directory.claims]` the entry has a value for. A value a token cannot
    /// carry (a `,`, a control character, too long) is left out and logged.
    pub fn claims(&self, config: &DirectoryConfig) -> Vec<(String, String)> {
        config
            .claims
            .iter()
            .filter_map(|(claim, attr)| {
                let value = self.first(attr)?;
                if !shared::rules::claim_value_ok(value) {
                    tracing::warn!(
                        dn = self.dn.as_str(),
                        attribute = attr.as_str(),
                        "directory attribute left out of the token: its value cannot be a claim"
                    );
                    return None;
                }
                Some((claim.clone(), value.to_owned()))
            })
            .collect()
    }
}

/// The user filter with `username` escaped into it.
pub fn user_filter(config: &DirectoryConfig, username: &str) -> String {
    config
        .user_filter
        .replace(crate::config::directory::USERNAME, &ldap_escape(username))
}

/// The attributes to read of a user.
fn user_attributes(config: &DirectoryConfig) -> Vec<String> {
    let mut attrs: Vec<String> = config.claims.values().cloned().collect();
    attrs.push("memberOf".into());
    attrs.push(config.name_attribute.clone());
    attrs.push(config.id_attribute.clone());
    attrs.push(match config.kind {
        DirectoryKind::ActiveDirectory => "userAccountControl".into(),
        DirectoryKind::Ldap => "pwdAccountLockedTime".into(),
    });
    attrs
}

/// Searches `base` with `filter`, entries only (references left out). Result codes 0 and 4
/// (size limit: more entries than asked for) are answers; any other is an error.
async fn search(
    ldap: &mut Ldap,
    timeout: Duration,
    base: &str,
    scope: Scope,
    filter: &str,
    attrs: &[String],
    limit: i32,
) -> Result<Vec<Entry>, LdapError> {
    let SearchResult(entries, result) = ldap
        .with_search_options(SearchOptions::new().sizelimit(limit))
        .with_timeout(timeout)
        .search(base, scope, filter, attrs)
        .await?;
    if result.rc != 0 && result.rc != 4 {
        return Err(LdapError::from(result));
    }
    Ok(entries
        .into_iter()
        .filter(|e| !e.is_ref() && !e.is_intermediate())
        .map(|e| {
            let e = SearchEntry::construct(e);
            Entry {
                dn: e.dn,
                attrs: e.attrs,
                bin_attrs: e.bin_attrs,
            }
        })
        .collect())
}

/// The entry of `username`.
pub async fn find_user(
    ldap: &mut Ldap,
    config: &DirectoryConfig,
    timeout: Duration,
    username: &str,
) -> Result<Found, LdapError> {
    let filter = user_filter(config, username);
    let attrs = user_attributes(config);
    let mut found = search(
        ldap,
        timeout,
        &config.base_dn,
        Scope::Subtree,
        &filter,
        &attrs,
        2,
    )
    .await?;
    Ok(match found.len() {
        0 => Found::None,
        1 => Found::One(found.remove(0)),
        _ => Found::Many,
    })
}

/// A DN for comparison: lower case, no spaces around `,`, `=` and `+` (escaped separators are
/// rare in group DNs and compare as written).
pub fn normal_dn(dn: &str) -> String {
    let mut out = String::with_capacity(dn.len());
    for part in dn.split(',') {
        if !out.is_empty() {
            out.push(',');
        }
        let avas: Vec<String> = part
            .split('+')
            .map(|ava| {
                let kv: Vec<String> = ava.split('=').map(|s| s.trim().to_lowercase()).collect();
                kv.join("=")
            })
            .collect();
        out.push_str(&avas.join("+"));
    }
    out
}

/// The roles of `[directory.roles]` whose group is among `groups` (normalised DNs), sorted.
pub fn roles(config: &DirectoryConfig, groups: &BTreeSet<String>) -> Vec<String> {
    let roles: BTreeSet<String> = config
        .roles
        .iter()
        .filter(|(group, _)| groups.contains(&normal_dn(group)))
        .map(|(_, role)| role.clone())
        .collect();
    roles.into_iter().collect()
}

/// Every group `user` is in, directly or through nested groups, as normalised DNs. Not asked for
/// when no roles are configured.
pub async fn groups(
    ldap: &mut Ldap,
    config: &DirectoryConfig,
    timeout: Duration,
    user: &Entry,
    parents: &GroupParents,
) -> Result<BTreeSet<String>, LdapError> {
    if config.roles.is_empty() {
        return Ok(BTreeSet::new());
    }
    match config.kind {
        DirectoryKind::ActiveDirectory => {
            let filter = format!("(member:{IN_CHAIN}:={})", ldap_escape(user.dn.as_str()));
            let found = search(
                ldap,
                timeout,
                &config.base_dn,
                Scope::Subtree,
                &filter,
                &["1.1".to_owned()],
                MAX_GROUPS as i32,
            )
            .await?;
            if found.len() >= MAX_GROUPS {
                tracing::warn!(
                    dn = user.dn.as_str(),
                    "more than {MAX_GROUPS} groups: roles from the first {MAX_GROUPS} only"
                );
            }
            Ok(found.iter().map(|e| normal_dn(&e.dn)).collect())
        }
        DirectoryKind::Ldap => member_of_closure(ldap, timeout, user, parents).await,
    }
}

/// How long the parents of a group read from the directory are used.
pub const PARENTS_TTL: Duration = Duration::from_secs(30);
/// Groups whose parents are kept at most.
const MAX_CACHED_GROUPS: usize = 10_000;

/// The parents (`memberOf`) of groups as read within [`PARENTS_TTL`]: nesting changes rarely,
/// while the user's own groups are read at every sign-in, refresh and recheck.
#[derive(Debug, Default)]
pub struct GroupParents {
    read: Mutex<HashMap<String, (Vec<String>, Instant)>>,
}

impl GroupParents {
    fn get(&self, group: &str) -> Option<Vec<String>> {
        let read = self.read.lock().unwrap_or_else(|p| p.into_inner());
        read.get(group)
            .filter(|(_, at)| at.elapsed() < PARENTS_TTL)
            .map(|(parents, _)| parents.clone())
    }

    fn put(&self, group: String, parents: Vec<String>) {
        let mut read = self.read.lock().unwrap_or_else(|p| p.into_inner());
        if read.len() >= MAX_CACHED_GROUPS {
            read.retain(|_, (_, at)| at.elapsed() < PARENTS_TTL);
            if read.len() >= MAX_CACHED_GROUPS {
                read.clear();
            }
        }
        read.insert(group, (parents, Instant::now()));
    }
}

/// `memberOf` followed breadth first from the user's own, each group read once (cycles end),
/// [`MAX_GROUP_DEPTH`] levels and [`MAX_GROUPS`] groups at most; a group's parents come from
/// `parents` when read lately.
async fn member_of_closure(
    ldap: &mut Ldap,
    timeout: Duration,
    user: &Entry,
    parents: &GroupParents,
) -> Result<BTreeSet<String>, LdapError> {
    let mut seen = BTreeSet::new();
    let mut level: Vec<String> = user.all("memberOf").cloned().collect();
    let attrs = ["memberOf".to_owned()];
    for _ in 0..MAX_GROUP_DEPTH {
        let mut next = Vec::new();
        for dn in level {
            let key = normal_dn(&dn);
            if seen.len() >= MAX_GROUPS || seen.contains(&key) {
                continue;
            }
            seen.insert(key.clone());
            if let Some(up) = parents.get(&key) {
                next.extend(up);
                continue;
            }
            let search = search(
                ldap,
                timeout,
                &dn,
                Scope::Base,
                "(objectClass=*)",
                &attrs,
                1,
            );
            let up: Vec<String> = match search.await {
                Ok(found) => found
                    .iter()
                    .flat_map(|g| g.all("memberOf").cloned())
                    .collect(),
                // A group that went away meanwhile: no parents to follow.
                Err(LdapError::LdapResult { result }) if result.rc == 32 => Vec::new(),
                Err(e) => return Err(e),
            };
            parents.put(key, up.clone());
            next.extend(up);
        }
        if next.is_empty() {
            break;
        }
        level = next;
    }
    Ok(seen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_compare_without_case_or_spaces() {
        assert_eq!(
            normal_dn("CN=Editors, OU=Groups ,DC=media,DC=test"),
            "cn=editors,ou=groups,dc=media,dc=test"
        );
        assert_eq!(normal_dn("cn = a + uid = b"), normal_dn("CN=a +UID=b"));
    }

    #[test]
    fn disabled_accounts_by_kind() {
        let entry = |k: &str, v: &str| Entry {
            dn: "cn=x".into(),
            attrs: HashMap::from([(k.to_owned(), vec![v.to_owned()])]),
            bin_attrs: HashMap::new(),
        };
        assert!(entry("userAccountControl", "514").disabled(DirectoryKind::ActiveDirectory));
        assert!(!entry("userAccountControl", "512").disabled(DirectoryKind::ActiveDirectory));
        assert!(!entry("userAccountControl", "junk").disabled(DirectoryKind::ActiveDirectory));
        assert!(entry("pwdAccountLockedTime", "000001010000Z").disabled(DirectoryKind::Ldap));
        assert!(!entry("pwdAccountLockedTime", "20261124120000Z").disabled(DirectoryKind::Ldap));
        assert!(!entry("mail", "a@b").disabled(DirectoryKind::Ldap));
    }
}

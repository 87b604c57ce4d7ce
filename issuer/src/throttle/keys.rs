//! What the back-off counts under: an account (a local user by its exact name, a directory name
//! by the form every spelling of it folds to) and an address (an IPv6 address by its prefix).

use serde::Serialize;
use std::net::{IpAddr, Ipv6Addr};
use unicode_normalization::UnicodeNormalization as _;

/// Whose sign-in is counted.
#[derive(Debug, Hash, PartialEq, Eq, Clone, Serialize)]
pub enum Account {
    /// A user of the issuer's own store, which compares names byte for byte: a guess at another
    /// spelling is another account, and never charges this one.
    Local(String),
    /// A name asked of the directory, folded as directories match names ([`fold_name`]), so
    /// that `bob`, `Bob`, ` bob` and `ｂｏｂ` are counted as one, whether an entry has it or not.
    Directory(String),
}

impl Account {
    /// The account of a name the directory is asked for.
    pub fn directory(typed: &str) -> Self {
        Self::Directory(fold_name(typed))
    }

    /// The name as the audit trail shows it.
    pub fn name(&self) -> &str {
        match self {
            Self::Local(n) | Self::Directory(n) => n,
        }
    }
}

/// Characters that LDAP's string preparation (RFC 4518 section 2.2) maps to nothing: soft
/// hyphen, joiners, variation selectors, directional marks, the byte order mark.
fn mapped_to_nothing(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{1806}'
            | '\u{180B}'..='\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFFC}'
    ) || (c.is_control() && !c.is_whitespace())
}

/// A name as a directory matches it (`caseIgnoreMatch` with RFC 4518's preparation, closely
/// enough): compatibility-normalised (NFKC: fullwidth letters become ASCII, a no-break space a
/// space), characters mapped to nothing dropped, lower case, spaces at either end dropped and
/// runs of spaces inside made one.
pub fn fold_name(name: &str) -> String {
    let prepared: String = name
        .nfkc()
        .filter(|c| !mapped_to_nothing(*c))
        .flat_map(char::to_lowercase)
        .collect();
    let mut folded = String::with_capacity(prepared.len());
    for word in prepared
        .split(char::is_whitespace)
        .filter(|w| !w.is_empty())
    {
        if !folded.is_empty() {
            folded.push(' ');
        }
        folded.push_str(word);
    }
    folded
}

/// The address an attempt is counted under: an IPv4 address (an IPv4-mapped IPv6 one too) as it
/// is, an IPv6 address by its first `v6_prefix` bits, since one host commonly holds a whole /64.
pub fn counted_address(addr: IpAddr, v6_prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(_) => addr,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let bits = u32::from(v6_prefix.min(128));
                let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_a_directory_matches_fold_alike() {
        for spelling in [
            "carol",
            "Carol",
            "CAROL",
            "carol ",
            " carol",
            "ｃａｒｏｌ",
            "carol\u{00A0}",
            "carol\u{3000}",
            "ca\u{00AD}rol",
            "\u{200B}carol",
        ] {
            assert_eq!(fold_name(spelling), "carol", "{spelling:?}");
        }
        assert_eq!(fold_name("Mary  Ann"), "mary ann");
        assert_ne!(fold_name("carol"), fold_name("caro1"));
        assert_eq!(fold_name(""), "");
    }

    #[test]
    fn ipv6_addresses_count_by_prefix() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let other: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(counted_address(a, 64), counted_address(b, 64));
        assert_ne!(counted_address(a, 64), counted_address(other, 64));
        assert_ne!(counted_address(a, 128), counted_address(b, 128));
        assert_eq!(counted_address(a, 0), counted_address(other, 0));
        let mapped: IpAddr = "::ffff:10.1.2.3".parse().unwrap();
        assert_eq!(counted_address(mapped, 64), IpAddr::from([10, 1, 2, 3]));
        let v4: IpAddr = "10.1.2.3".parse().unwrap();
        assert_eq!(counted_address(v4, 64), v4);
    }
}

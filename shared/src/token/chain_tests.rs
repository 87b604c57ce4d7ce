//! Tokens with an actor chain: minted, verified and inspected with it; the chain's rules refused
//! when minting as when decoding.

use super::*;

fn key() -> Key {
    Key::new(1, [1; 32])
}

fn chained(actors: &[&str], cnf: Option<[u8; JKT_LEN]>) -> TokenBody {
    TokenBody {
        kid: 1,
        jti: [3; JTI_LEN],
        iat: 1_000,
        exp: 1_300,
        client: actors.first().copied().unwrap_or("nobody").into(),
        identity: Identity {
            kind: SubjectKind::User,
            subject: "alice".into(),
            roles: vec!["editor".into()],
            claims: vec![],
        },
        cnf,
        act: Some(Chain {
            origin: "web".into(),
            actors: actors.iter().map(|a| (*a).to_owned()).collect(),
        }),
    }
}

#[test]
fn a_chain_round_trips_bearer_and_bound() {
    let ring = KeyRing::new(vec![key()], Some(1)).unwrap();
    for cnf in [None, Some([0xcd; JKT_LEN])] {
        let body = chained(&["media", "transcoder", "uploader"], cnf);
        let t = mint(&key(), &body).unwrap();
        assert_eq!(
            verify_any_with(
                &ring,
                &t,
                1_100,
                Limits {
                    skew: 0,
                    max_lifetime: 300
                }
            )
            .unwrap()
            .body(),
            &body
        );
        assert_eq!(inspect(&t).unwrap(), body);
        let chain = body.act.as_ref().unwrap();
        assert_eq!(chain.depth(), 3);
        assert_eq!(
            chain.clients().collect::<Vec<_>>(),
            ["media", "transcoder", "uploader", "web"]
        );
        assert!(chain.names("web") && chain.names("transcoder") && !chain.names("alice"));
    }
}

#[test]
fn a_token_without_a_chain_is_minted_as_before() {
    let mut body = chained(&["uploader"], None);
    let with = mint(&key(), &body).unwrap();
    body.act = None;
    let without = mint(&key(), &body).unwrap();
    assert!(with.len() > without.len());
    let raw = |t: &str| {
        URL_SAFE_NO_PAD
            .decode(t.split('.').nth(1).unwrap())
            .unwrap()
    };
    // The chain is a section after the claims: the body without it is a prefix.
    assert!(raw(&with).starts_with(&raw(&without)));
}

#[test]
fn the_depth_is_capped() {
    let names: Vec<String> = (0..=MAX_CHAIN_DEPTH).map(|i| format!("a{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    assert!(mint(&key(), &chained(&refs[..MAX_CHAIN_DEPTH], None)).is_ok());
    assert_eq!(
        mint(&key(), &chained(&refs, None)),
        Err(MintError::ChainDepth)
    );
    assert_eq!(
        mint(&key(), &chained(&[], None)),
        Err(MintError::ChainDepth)
    );
}

#[test]
fn cycles_and_a_wrong_first_actor_are_refused() {
    assert_eq!(
        mint(&key(), &chained(&["a", "b", "a"], None)),
        Err(MintError::ChainCycle)
    );
    assert_eq!(
        mint(&key(), &chained(&["web"], None)),
        Err(MintError::ChainCycle),
        "the origin acting for its own subject"
    );
    let mut body = chained(&["a", "b"], None);
    body.client = "b".into();
    assert_eq!(mint(&key(), &body), Err(MintError::InconsistentIdentity));
    let mut body = chained(&["a", ""], None);
    body.client = "a".into();
    assert_eq!(mint(&key(), &body), Err(MintError::InvalidField("actor")));
}

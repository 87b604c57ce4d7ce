use super::*;
use crate::token::Identity;

fn body(kind: SubjectKind, subject: &str, client: &str, iat: u64) -> TokenBody {
    TokenBody {
        kid: 1,
        jti: [7; 16],
        iat,
        exp: iat + 600,
        client: client.into(),
        identity: Identity {
            kind,
            subject: subject.into(),
            roles: vec![],
            claims: vec![],
        },
        cnf: None,
        act: None,
    }
}

fn entry(seq: u64, what: Revoked, at: u64) -> Revocation {
    Revocation {
        seq,
        what,
        at,
        until: at + 600,
        stamp: Some(seq * 1_000),
    }
}

#[test]
fn tokens_issued_before_a_revocation_are_covered_and_later_ones_not() {
    let mut set = RevocationSet::default();
    let alice = body(SubjectKind::User, "alice", "app", 1_000);
    assert!(!set.covers(&alice));
    set.apply(
        &[entry(
            1,
            Revoked::User {
                name: "alice".into(),
            },
            1_000,
        )],
        1_001,
    );
    assert!(set.covers(&alice), "issued in the second of the revocation");
    assert!(!set.covers(&body(SubjectKind::User, "alice", "app", 1_001)));
    assert!(!set.covers(&body(SubjectKind::User, "bob", "app", 900)));
    // An impersonated subject of the same name is not the user.
    assert!(!set.covers(&body(SubjectKind::Impersonation, "alice", "app", 900)));
    set.apply(
        &[entry(2, Revoked::Client { id: "app".into() }, 1_010)],
        1_011,
    );
    assert!(set.covers(&body(SubjectKind::Client, "", "app", 1_005)));
    assert!(
        set.covers(&body(SubjectKind::Client, "", "app", 1_011)),
        "minted through a client cache a second old"
    );
    assert!(!set.covers(&body(SubjectKind::Client, "", "app", 1_012)));
    set.apply(
        &[entry(
            3,
            Revoked::Token {
                jti: "07".repeat(16),
            },
            1_020,
        )],
        1_021,
    );
    assert!(set.covers(&body(SubjectKind::User, "carol", "other", 1_019)));
    assert_eq!((set.cursor(), set.len()), (3, 3));
}

#[test]
fn entries_apply_once_in_order_and_expire() {
    let mut set = RevocationSet::default();
    let e = entry(
        5,
        Revoked::User {
            name: "alice".into(),
        },
        1_000,
    );
    set.apply(std::slice::from_ref(&e), 1_001);
    set.apply(
        &[entry(4, Revoked::Client { id: "app".into() }, 1_000)],
        1_001,
    );
    assert_eq!(set.len(), 1, "an entry at or before the cursor is old news");
    set.apply(&[], 1_600);
    assert!(
        set.is_empty(),
        "gone once every token it covered has expired"
    );
    assert_eq!(set.cursor(), 5);
}

#[test]
fn each_entry_goes_at_its_own_until_and_not_before() {
    let mut set = RevocationSet::default();
    let until = |seq, until| Revocation {
        seq,
        what: Revoked::Token {
            jti: format!("{seq:032x}"),
        },
        at: 1_000,
        until,
        stamp: None,
    };
    set.apply(&[until(1, 1_300), until(2, 1_100), until(3, 1_200)], 1_000);
    let held = |set: &RevocationSet| {
        (1..=4)
            .filter(|&n| set.has_token(&parse_jti(&format!("{n:032x}")).unwrap()))
            .collect::<Vec<_>>()
    };
    set.apply(&[], 1_099);
    assert_eq!(held(&set), [1, 2, 3]);
    set.apply(&[], 1_100);
    assert_eq!(held(&set), [1, 3]);
    set.apply(&[until(4, 1_150)], 1_101);
    assert_eq!(held(&set), [1, 3, 4]);
    set.apply(&[], 1_150);
    assert_eq!(held(&set), [1, 3], "one added later is due in its turn");
    set.apply(&[], 1_299);
    assert_eq!(held(&set), [1]);
    set.apply(&[], 1_300);
    assert!(set.is_empty());
}

#[test]
fn a_snapshot_adds_to_what_is_held_and_resets_the_cursor() {
    let mut set = RevocationSet::default();
    let alice = Revoked::User {
        name: "alice".into(),
    };
    set.apply(&[entry(9, alice, 1_000)], 1_001);
    set.apply_snapshot(
        &[entry(2, Revoked::Client { id: "app".into() }, 1_000)],
        2,
        1_001,
    );
    assert_eq!((set.cursor(), set.len()), (2, 2), "alice stays revoked");
    assert!(set.covers(&body(SubjectKind::User, "alice", "web", 999)));
}

#[test]
fn a_family_revocation_covers_the_tokens_tagged_with_it() {
    let mut set = RevocationSet::default();
    let tag = Revoked::Family {
        tag: "07".repeat(FAMILY_TAG_LEN),
    };
    set.apply(&[entry(1, tag, 1_000)], 1_001);
    let mut tagged = body(SubjectKind::User, "alice", "app", 2_000);
    tagged.jti = [7, 7, 7, 7, 7, 7, 7, 7, 1, 2, 3, 4, 5, 6, 7, 8];
    assert!(set.covers(&tagged), "whenever it was issued");
    tagged.jti[7] = 8;
    assert!(!set.covers(&tagged));
}

#[test]
fn cursors_carry_the_stamp_of_their_entry_and_parse_strictly() {
    let mut set = RevocationSet::default();
    assert_eq!(set.position(), Cursor::default());
    let alice = Revoked::User {
        name: "alice".into(),
    };
    set.apply(&[entry(4, alice.clone(), 1_000)], 1_001);
    assert_eq!(
        set.position(),
        Cursor {
            seq: 4,
            stamp: Some(4_000)
        }
    );
    set.stamp_cursor(4, Some(7));
    assert_eq!(set.position().stamp, Some(7));
    set.stamp_cursor(5, Some(8));
    assert_eq!(set.position().stamp, None, "a stamp for another number");
    set.apply_snapshot(&[], 9, 1_001);
    assert_eq!(
        set.position(),
        Cursor {
            seq: 9,
            stamp: None
        }
    );
    set.stamp_cursor(9, Some(u64::MAX));
    let c = set.position();
    assert_eq!(c.to_string(), "9.ffffffffffffffff");
    assert_eq!(Cursor::parse(&c.to_string()), Some(c));
    assert_eq!(
        Cursor::parse("12"),
        Some(Cursor {
            seq: 12,
            stamp: None
        })
    );
    assert_eq!(
        Cursor::parse("0.000000000000000a").map(|c| c.stamp),
        Some(Some(10))
    );
    for bad in [
        "",
        "+5",
        " 5",
        "5 ",
        "-1",
        "0x5",
        "5.",
        ".000000000000000a",
        "5.000000000000000A",
        "5.00000000000000a",
        "5.+00000000000000a",
        "5.000000000000000a.1",
        "18446744073709551616",
        "000000000000000000001",
    ] {
        assert_eq!(Cursor::parse(bad), None, "{bad:?}");
    }
}

#[test]
fn a_page_continues_a_cursor_only_of_its_own_history() {
    let page = RevocationPage {
        entries: vec![entry(6, Revoked::Client { id: "app".into() }, 1_000)],
        latest: 7,
        latest_stamp: Some(70),
        since_stamp: Some(50),
    };
    assert!(page.continues(5, Some(50)));
    assert!(
        page.continues(5, None),
        "no stamp: by the number, as before stamps"
    );
    assert!(!page.continues(5, Some(51)), "entry 5 of another history");
    assert!(
        !page.continues(8, None),
        "a number the store never gave out"
    );
    let swept = RevocationPage {
        since_stamp: None,
        ..page.clone()
    };
    assert!(!swept.continues(5, Some(50)), "entry 5 is gone");
    assert_eq!(
        [5, 6, 7, 4].map(|n| page.stamp_of(n, 5)),
        [Some(50), Some(6_000), Some(70), None]
    );
}

#[test]
fn token_ids_parse_from_hex_only() {
    assert_eq!(parse_jti(&"0a".repeat(16)), Some([10; 16]));
    assert_eq!(parse_jti(&"0A".repeat(16)), Some([10; 16]));
    for bad in [
        "",
        "0a",
        &"0g".repeat(16),
        &"+a".repeat(16),
        &"0a".repeat(17),
    ] {
        assert_eq!(parse_jti(bad), None, "{bad}");
    }
}

#[test]
fn a_revoked_client_anywhere_in_an_actor_chain_covers_the_token() {
    let chained = |iat| TokenBody {
        act: Some(crate::token::Chain {
            origin: "web".into(),
            actors: vec!["media".into(), "transcoder".into(), "uploader".into()],
        }),
        ..body(SubjectKind::User, "alice", "media", iat)
    };
    for (seq, revoked) in ["web", "uploader", "transcoder", "media"]
        .iter()
        .enumerate()
    {
        let mut set = RevocationSet::default();
        set.apply(
            &[entry(1, Revoked::Client { id: "other".into() }, 1_000)],
            1_001,
        );
        assert!(!set.covers(&chained(1_000)));
        let seq = seq as u64 + 2;
        set.apply(
            &[entry(
                seq,
                Revoked::Client {
                    id: (*revoked).into(),
                },
                1_000,
            )],
            1_001,
        );
        assert!(set.covers(&chained(1_000)), "{revoked} revoked");
        assert!(
            !set.covers(&chained(1_002)),
            "{revoked}: minted after the revocation and its grace"
        );
        assert!(
            !set.covers(&body(SubjectKind::User, "alice", "other-app", 1_000)),
            "a token without a chain names only its client"
        );
    }
    let mut set = RevocationSet::default();
    set.apply(
        &[entry(
            1,
            Revoked::User {
                name: "alice".into(),
            },
            1_000,
        )],
        1_001,
    );
    assert!(set.covers(&chained(1_000)), "the subject's revocation");
}

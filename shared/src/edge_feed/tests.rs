use super::*;
use serde_json::{json, Value};

fn entry(seq: u64, what: Revoked) -> Revocation {
    Revocation {
        seq,
        what,
        at: 1_000,
        until: 2_000,
        stamp: Some(7),
    }
}

fn every_kind() -> Vec<Revocation> {
    vec![
        entry(
            1,
            Revoked::Token {
                jti: "ab".repeat(16),
            },
        ),
        entry(
            2,
            Revoked::User {
                name: "Zoë".into()
            },
        ),
        entry(3, Revoked::Client { id: "app".into() }),
        entry(
            4,
            Revoked::Family {
                tag: "0c".repeat(8),
            },
        ),
    ]
}

/// A revocation as the issuer wrote it with `json!` before these types: `Revoked`'s own
/// serialization (`kind` and its field) with the numbers beside.
fn as_written_before(e: &Revocation) -> Value {
    let mut v = serde_json::to_value(&e.what).unwrap();
    v["seq"] = json!(e.seq);
    v["at"] = json!(e.at);
    v["until"] = json!(e.until);
    v
}

fn text(v: &impl Serialize) -> String {
    serde_json::to_string(v).unwrap()
}

#[test]
fn answers_are_written_byte_for_byte_as_before() {
    let key = Key::new(3, [9; 32]);
    let revocations = every_kind();
    let answer = FeedAnswer {
        cursor: 4,
        cursor_stamp: Some("00000000000000ab".into()),
        full: true,
        keys: Some(vec![FeedKey::new(&key)]),
        keys_version: "0123abcd".into(),
        max_token_lifetime_seconds: Some(3600),
        more: true,
        revoked: revocations.iter().map(FeedEntry::from).collect(),
        wait_max_seconds: None,
        busy: false,
    };
    let before = json!({
        "cursor": 4,
        "keys_version": "0123abcd",
        "revoked": revocations.iter().map(as_written_before).collect::<Vec<_>>(),
        "cursor_stamp": "00000000000000ab",
        "full": true,
        "more": true,
        "keys": [{"kid": 3, "secret": URL_SAFE_NO_PAD.encode([9; 32])}],
        "max_token_lifetime_seconds": 3600,
    });
    assert_eq!(text(&answer), text(&before));
    // An answer with nothing new leaves every optional field out.
    let idle = FeedAnswer {
        cursor: 4,
        cursor_stamp: None,
        full: false,
        keys: None,
        keys_version: "0123abcd".into(),
        max_token_lifetime_seconds: None,
        more: false,
        revoked: vec![],
        wait_max_seconds: None,
        busy: false,
    };
    assert_eq!(
        text(&idle),
        r#"{"cursor":4,"keys_version":"0123abcd","revoked":[]}"#
    );
    let waiting = FeedAnswer {
        wait_max_seconds: Some(30),
        busy: true,
        ..idle
    };
    assert_eq!(
        text(&waiting),
        r#"{"cursor":4,"keys_version":"0123abcd","revoked":[],"wait_max_seconds":30,"busy":true}"#
    );
    for e in &revocations {
        assert_eq!(text(&FeedEntry::from(e)), text(&as_written_before(e)));
    }
}

#[test]
fn answers_read_back_with_defaults_and_unknown_fields_ignored() {
    let read: FeedAnswer = serde_json::from_str(
        r#"{"cursor":4,"keys_version":"v","revoked":[{"kind":"user","name":"bob","seq":4,"at":1,"until":2,"later":1}],"later":true}"#,
    )
    .unwrap();
    assert_eq!(
        (read.cursor, read.full, read.more, read.keys.is_none()),
        (4, false, false, true)
    );
    assert_eq!(read.cursor_stamp, None);
    assert_eq!(read.max_token_lifetime_seconds, None);
    assert_eq!(
        read.revoked[0].clone().revoked(),
        Some(Revoked::User { name: "bob".into() })
    );
    // Keys are strict: an unknown field is refused.
    let strict =
        r#"{"cursor":4,"keys_version":"v","revoked":[],"keys":[{"kid":1,"secret":"x","other":1}]}"#;
    assert!(serde_json::from_str::<FeedAnswer>(strict).is_err());
    for missing in [
        r#"{"keys_version":"v","revoked":[]}"#,
        r#"{"cursor":1,"revoked":[]}"#,
        r#"{"cursor":1,"keys_version":"v"}"#,
        r#"{"cursor":1,"keys_version":"v","revoked":[{"kind":"user","name":"b","at":1,"until":2}]}"#,
    ] {
        assert!(
            serde_json::from_str::<FeedAnswer>(missing).is_err(),
            "{missing}"
        );
    }
}

#[test]
fn entries_round_trip_and_name_exactly_one_thing() {
    for e in every_kind() {
        let written = text(&FeedEntry::from(&e));
        let read: FeedEntry = serde_json::from_str(&written).unwrap();
        assert_eq!((read.seq, read.at, read.until), (e.seq, e.at, e.until));
        assert_eq!(read.revoked(), Some(e.what));
    }
    let read = |v: Value| serde_json::from_value::<FeedEntry>(v).unwrap().revoked();
    let base = |kind: &str| json!({"kind": kind, "seq": 1, "at": 1, "until": 2});
    let with = |kind: &str, fields: &[(&str, &str)]| {
        let mut v = base(kind);
        for (name, value) in fields {
            v[*name] = json!(value);
        }
        read(v)
    };
    let long = "n".repeat(MAX_NAME);
    assert!(with("user", &[("name", &long)]).is_some());
    assert!(with("client", &[("id", &long)]).is_some());
    for refused in [
        with("token", &[("jti", "zz")]),
        with("token", &[("jti", &"ab".repeat(15))]),
        with("user", &[("name", "")]),
        with("user", &[("name", &format!("{long}n"))]),
        with("client", &[("id", "")]),
        with("family", &[("tag", "0a")]),
        with("user", &[("name", "e"), ("jti", &"ab".repeat(16))]),
        with("user", &[("id", "e")]),
        with("group", &[("name", "e")]),
        with("user", &[]),
    ] {
        assert_eq!(refused, None);
    }
}

#[test]
fn keys_round_trip_and_never_show_their_secret() {
    let key = Key::new(5, [0xfe; 32]);
    let written = FeedKey::new(&key);
    let read = written.key().unwrap();
    assert_eq!((read.id(), read.secret()), (5, &[0xfe; 32]));
    assert!(!format!("{written:?}").contains(written.secret.as_str()));
    let bad = |secret: &str| {
        FeedKey {
            kid: 1,
            secret: Zeroizing::new(secret.into()),
        }
        .key()
        .err()
    };
    assert_eq!(bad("!!"), Some(BadSecret::Encoding));
    assert_eq!(
        bad(&format!("{}=", &*written.secret)),
        Some(BadSecret::Encoding)
    );
    assert_eq!(bad("c2hvcnQ"), Some(BadSecret::Length));
}

#[test]
fn a_vm_name_gives_back_its_number() {
    let name = vm_name(0x1234_5678_9abc_def0, 3);
    assert_eq!(name, "789abcdef003");
    assert_eq!(vm_ordinal(&name), Some(3));
    assert_eq!(vm_ordinal(&vm_name(7, 256 + 17)), Some(17));
    for other in [
        "worker-1",
        "789ABCDEF003",
        "789abcdef0031",
        "789abcdef0g3",
        "",
    ] {
        assert_eq!(vm_ordinal(other), None, "{other}");
    }
}

#[test]
fn answers_with_fields_a_reader_does_not_know_still_parse() {
    // How filters older than a field read answers that carry it (`wait_max_seconds` and `busy`
    // were added so): unknown fields are ignored, never refused.
    let v = json!({"cursor": 4, "keys_version": "v", "revoked": [], "wait_max_seconds": 30,
                   "busy": true, "a_field_of_the_future": {"x": 1}});
    let a: FeedAnswer = serde_json::from_value(v).unwrap();
    assert_eq!((a.cursor, a.wait_max_seconds, a.busy), (4, Some(30), true));
}

#[test]
fn the_relay_headers_are_distinct_lower_case_names() {
    // Lower case, as HTTP header maps hold names; each once.
    for (i, name) in RELAY_HEADERS.iter().enumerate() {
        assert!(
            !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            "{name}"
        );
        assert!(!RELAY_HEADERS[..i].contains(name), "{name} twice");
    }
    for name in [
        "forwarded",
        "via",
        "x-real-ip",
        "x-client-ip",
        "true-client-ip",
        "cf-connecting-ip",
        "x-envoy-external-address",
        "x-envoy-internal",
    ] {
        assert!(RELAY_HEADERS.contains(&name), "{name}");
    }
}

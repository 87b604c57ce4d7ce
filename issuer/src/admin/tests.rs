use super::*;
use crate::config::admin_http::CONSOLE_CLIENT;
use crate::store::prelude::*;
use crate::store::redb::RedbStore;
use crate::store::{GrantKind, RefreshPolicy};
use std::path::Path;

const NOW: u64 = 1_700_000_000;

fn store(dir: &Path) -> RedbStore {
    RedbStore::open(dir, NOW, RefreshPolicy::default()).unwrap()
}

/// A command as the socket receives it.
fn from_json(json: serde_json::Value) -> Command {
    serde_json::from_value(json).unwrap()
}

/// Why `result` was refused, which must be a refusal of `kind`.
fn refusal(result: Result<Reply, AdminError>, kind: RefusalKind) -> String {
    match result {
        Err(AdminError::Refused { kind: k, why }) if k == kind => why,
        other => panic!("not refused as {kind:?}: {other:?}"),
    }
}

#[tokio::test]
async fn commands_from_the_socket_meet_the_command_lines_rules() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(&tmp.path().join("data"));
    let hash = crate::passwords::hash_password("pw");
    let user = |name: &str, role: &str, claim: (&str, &str)| {
        from_json(serde_json::json!({
            "op": "user_add", "name": name, "roles": [role], "claims": [[claim.0, claim.1]],
            "password_hash": hash,
        }))
    };
    let cases = [
        (user("a\u{1}b", "r", ("t", "v")), "a user name is 1 to 255"),
        (user("", "r", ("t", "v")), "a user name is 1 to 255"),
        (user("bob", "a,b", ("t", "v")), "invalid role \"a,b\""),
        (user("bob", "", ("t", "v")), "invalid role \"\""),
        (user("bob", "r", ("t", "v=w")), "invalid claim \"t=v=w\""),
        (user("bob", "r", ("t=u", "v")), "invalid claim \"t=u=v\""),
        (user("bob", "r", ("t", "a,b")), "invalid claim \"t=a,b\""),
        (user("bob", "r", ("", "v")), "invalid claim \"=v\""),
    ];
    let weak = bcrypt::hash("pw", 4).unwrap();
    let hashed = |h: &str| {
        from_json(serde_json::json!({
            "op": "user_add", "name": "bob", "roles": [], "claims": [], "password_hash": h,
        }))
    };
    let cases = cases.into_iter().chain([
        (hashed("$2y$10$abc"), "password_hash must be a PHC string"),
        (hashed(&weak), "password_hash is a bcrypt hash with a cost"),
        (
            hashed("$2b$10$short"),
            "password_hash is not a well-formed bcrypt",
        ),
    ]);
    for (cmd, why) in cases {
        let msg = refusal(execute(&store, &cmd, NOW).await, RefusalKind::Invalid);
        assert!(msg.starts_with(why), "{cmd:?}: {msg}");
    }
    let client = from_json(serde_json::json!({
        "op": "client_add", "id": "a:b", "grants": [], "impersonate": false, "claim_types": [],
        "secret_hash": "00".repeat(32),
    }));
    let msg = refusal(execute(&store, &client, NOW).await, RefusalKind::Invalid);
    assert!(msg.starts_with("a client id is 1 to 255"), "{msg}");
    // Nothing was stored; what meets the rules is.
    assert!(store.users().await.unwrap().is_empty());
    assert!(store.clients().await.unwrap().is_empty());
    let ok = user("bob", "r", ("t", "v"));
    assert_eq!(
        execute(&store, &ok, NOW).await.unwrap(),
        Reply::Text("user bob added\n".into())
    );
    // Without a password: stored, and no hash scheme shows.
    let none = from_json(serde_json::json!({
        "op": "user_add", "name": "carol", "roles": [], "claims": [], "password_hash": "",
    }));
    execute(&store, &none, NOW).await.unwrap();
    let Reply::Users(listed) = execute(&store, &Command::UserList, NOW).await.unwrap() else {
        panic!("not a listing of users");
    };
    let schemes: Vec<_> = listed
        .iter()
        .map(|u| u.password_scheme.as_deref())
        .collect();
    assert_eq!(schemes, [Some("argon2id"), None]);
}

#[tokio::test]
async fn each_refusal_is_of_its_kind_and_keeps_its_sentence() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(&tmp.path().join("data"));
    let client = |id: &str, hash: &str| {
        from_json(serde_json::json!({
            "op": "client_add", "id": id, "grants": [], "impersonate": false,
            "claim_types": [], "secret_hash": hash,
        }))
    };
    let hash = "00".repeat(32);
    execute(&store, &client("app", &hash), NOW).await.unwrap();
    let unknown_session = Command::SessionRevoke {
        id: "00".repeat(16),
    };
    let cases = [
        (
            Command::UserEnable {
                name: "ghost".into(),
            },
            RefusalKind::NotFound,
            "no user named \"ghost\"",
        ),
        (
            Command::KeysRetire { kid: 999 },
            RefusalKind::NotFound,
            "no key 999",
        ),
        (
            unknown_session,
            RefusalKind::NotFound,
            "no session \"00000000000000000000000000000000\"",
        ),
        (
            Command::SessionRevoke { id: "xyz".into() },
            RefusalKind::Invalid,
            sessions::SESSION_ID_RULE,
        ),
        (
            client("x", "zz"),
            RefusalKind::Invalid,
            "malformed secret hash",
        ),
        (
            client(CONSOLE_CLIENT, &hash),
            RefusalKind::Invalid,
            "the client id \"admin-console\" is reserved for the admin console",
        ),
        (
            Command::Backup,
            RefusalKind::Invalid,
            "a backup goes through the admin socket: `issuer backup`",
        ),
        (
            client("app", &hash),
            RefusalKind::Conflict,
            "a client named \"app\" exists",
        ),
    ];
    for (cmd, kind, why) in cases {
        let msg = refusal(execute(&store, &cmd, NOW).await, kind);
        assert!(msg.starts_with(why), "{cmd:?}: {msg}");
    }
}

#[test]
fn the_command_line_and_the_socket_check_alike() {
    assert_eq!(
        input::parse_claim("email=a@b.c").unwrap(),
        ("email".to_owned(), "a@b.c".to_owned())
    );
    assert!(input::parse_claim("email").is_err());
    for bad in ["=x", "email=", "a=b=c", "a,b=c", "a=b,c", "a=\u{1}"] {
        let (t, v) = bad.split_once('=').unwrap();
        let cli = input::parse_claim(bad).unwrap_err().to_string();
        let socket = input::check_claims(&[(t.to_owned(), v.to_owned())]);
        assert_eq!(socket.unwrap_err().to_string(), cli);
    }
}

#[test]
fn the_wire_format_is_unchanged() {
    let add = Command::ClientAdd(NewClient {
        id: "app".into(),
        grants: vec![GrantKind::Password],
        impersonate: true,
        claim_types: vec!["email".into()],
        edge: false,
        dpop: Default::default(),
        secret_hash: "ab".into(),
        active: false,
        exchange: None,
    });
    assert_eq!(
        serde_json::to_value(&add).unwrap(),
        serde_json::json!({
            "op": "client_add", "id": "app", "grants": ["password"], "impersonate": true,
            "claim_types": ["email"], "edge": false, "secret_hash": "ab",
        })
    );
    // `edge` may be left out, as before edge clients existed.
    let old = r#"{"op":"client_add","id":"x","grants":[],"impersonate":false,"claim_types":[],"secret_hash":""}"#;
    assert!(matches!(serde_json::from_str(old).unwrap(), Command::ClientAdd(c) if !c.edge));
    let user = Command::UserAdd(NewUser {
        name: "bob".into(),
        roles: vec!["r".into()],
        claims: vec![("t".into(), "v".into())],
        password_hash: "h".into(),
        disabled: false,
    });
    assert_eq!(
        serde_json::to_value(&user).unwrap(),
        serde_json::json!({
            "op": "user_add", "name": "bob", "roles": ["r"], "claims": [["t", "v"]],
            "password_hash": "h",
        })
    );
    assert_eq!(
        serde_json::to_value(Command::KeysRotate { delay: 5 }).unwrap(),
        serde_json::json!({"op": "keys_rotate", "delay": 5})
    );
}

#[tokio::test]
async fn replies_cross_the_socket_as_the_module_doc_says() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(&tmp.path().join("data"));
    let ping: Command = from_json(serde_json::json!({"op": "ping"}));
    let pong = Answer::Ok(execute(&store, &ping, NOW).await.unwrap());
    assert_eq!(
        serde_json::to_value(&pong).unwrap(),
        serde_json::json!({"ok": {"reply": "pong"}})
    );
    let done = Answer::Ok(Reply::Text("client app removed\n".into()));
    assert_eq!(
        serde_json::to_value(&done).unwrap(),
        serde_json::json!({"ok": {"reply": "text", "value": "client app removed\n"}})
    );
    let err = Answer::Err("no client named \"app\"".into());
    assert_eq!(
        serde_json::to_value(&err).unwrap(),
        serde_json::json!({"err": "no client named \"app\""})
    );
    // Every listing reads back as it was sent.
    for cmd in [
        Command::ClientList,
        Command::UserList,
        Command::KeysList,
        Command::KeysFilterConfig,
        Command::Edges,
        Command::AuditRead { since: 0 },
    ] {
        let reply = execute(&store, &cmd, NOW).await.unwrap();
        let line = serde_json::to_string(&Answer::Ok(reply.clone())).unwrap();
        assert!(!line.contains('\n'), "{line}");
        let Answer::Ok(back) = serde_json::from_str(&line).unwrap() else {
            panic!("{line}");
        };
        assert_eq!(back, reply, "{cmd:?}");
    }
}

#[tokio::test]
async fn listings_change_nothing_and_are_not_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let store = store(&tmp.path().join("data"));
    for cmd in [
        Command::Ping,
        Command::ClientList,
        Command::UserList,
        Command::KeysList,
        Command::KeysFilterConfig,
    ] {
        assert!(!cmd.is_change() && !cmd.changes_keys());
        let before = store.key_infos(NOW).await.unwrap().len();
        execute(&store, &cmd, NOW).await.unwrap();
        assert_eq!(store.key_infos(NOW).await.unwrap().len(), before);
    }
    for cmd in [
        Command::KeysRotate { delay: 0 },
        Command::KeysRetire { kid: 1 },
        Command::UserEnable { name: "x".into() },
    ] {
        assert!(cmd.is_change());
    }
    assert!(Command::KeysRotate { delay: 0 }.changes_keys());
    assert!(!Command::UserEnable { name: "x".into() }.changes_keys());
}

use super::*;
use crate::store::ClientChange;
use crate::vendor::Statement;

fn verified(vendor: &str, iat: u64, exp: u64, grants: Vec<VendorGrant>) -> Verified {
    Verified {
        vendor: vendor.into(),
        kid: "k".into(),
        statement: Statement {
            client_id: "app-1".into(),
            client_name: "App".into(),
            software_id: "app".into(),
            client_secret_hash: format!("hash-{iat}"),
            grant_types: grants,
            impersonation: Impersonation::Claims,
            iat,
            exp,
        },
    }
}

fn all() -> Vec<VendorGrant> {
    vec![VendorGrant::Password, VendorGrant::ClientCredentials]
}

#[test]
fn a_new_statement_makes_a_pending_client_and_the_same_one_changes_nothing() {
    let v = verified("acme", 100, 1000, all());
    let Admission::New(rec) = admit(None, &v, "d1", 150).unwrap() else {
        panic!("not new")
    };
    assert!(!rec.active && rec.vendor.as_ref().unwrap().pending);
    assert_eq!(
        rec.grants,
        [GrantKind::Password, GrantKind::ClientCredentials]
    );
    assert_eq!(admit(Some(&rec), &v, "d1", 150).unwrap(), Admission::Same);
    assert_eq!(
        admit(Some(&rec), &verified("other", 100, 1000, all()), "d9", 150),
        Err(Refusal::Taken)
    );
}

#[test]
fn a_rotation_keeps_both_secrets_until_the_older_expires_and_never_widens() {
    let Admission::New(mut rec) =
        admit(None, &verified("acme", 100, 1000, all()), "d1", 150).unwrap()
    else {
        panic!("not new")
    };
    let activate = ClientChange::ActivateVendor {
        grants: vec![GrantKind::ClientCredentials],
        impersonate: false,
    };
    activate.apply(&mut rec, 160);
    let newer = verified("acme", 200, 2000, vec![VendorGrant::Password]);
    let Admission::Rotated(next) = admit(Some(&rec), &newer, "d2", 300).unwrap() else {
        panic!("not rotated")
    };
    assert_eq!(
        next.secret_hashes(300).collect::<Vec<_>>(),
        ["hash-100", "hash-200"]
    );
    assert_eq!(next.secret_hashes(1000).collect::<Vec<_>>(), ["hash-200"]);
    ClientChange::Restate(next).apply(&mut rec, 300);
    assert!(
        rec.active && rec.grants.is_empty(),
        "narrowed to what both allow"
    );
    assert_eq!(
        admit(Some(&rec), &verified("acme", 150, 2000, all()), "d3", 300),
        Err(Refusal::Claim(
            "iat (older than a statement held for this client)"
        ))
    );
}

#[test]
fn a_revoked_or_local_client_refuses_statements() {
    let v = verified("acme", 100, 1000, all());
    let mut rec = revoked_placeholder("acme", 10);
    assert_eq!(admit(Some(&rec), &v, "d1", 150), Err(Refusal::Revoked));
    rec.vendor = None;
    assert_eq!(admit(Some(&rec), &v, "d1", 150), Err(Refusal::Taken));
    assert!(ClientChange::VendorRevoke.revokes("app-1").is_some());
}

//! A vendor's client on both backends (`issuer::store::vendor`): its statement's facts kept with
//! the record across a reopen, pending until activated, a newer statement narrowing it, and the
//! vendor's revocation deactivating it and revoking its tokens in the same change.

use super::Backend;
use issuer::store::revocation::Revoked;
use issuer::store::vendor::{admit, Admission};
use issuer::store::{ClientChange, GrantKind};
use issuer::vendor::{Impersonation, Statement, VendorGrant, Verified};

fn verified(iat: u64, grants: Vec<VendorGrant>) -> Verified {
    Verified {
        vendor: "acme".into(),
        kid: "kid".into(),
        statement: Statement {
            client_id: "acme-1".into(),
            client_name: "Acme Uploader".into(),
            software_id: "acme-uploader".into(),
            client_secret_hash: format!("$argon2id$v=19$m=19456,t=2,p=1$c2FsdA${iat}"),
            grant_types: grants,
            impersonation: Impersonation::Claims,
            iat,
            exp: iat + 10_000,
        },
    }
}

pub(super) async fn vendor_clients_are_kept_pending_activated_restated_and_revoked(b: Backend) {
    let all = vec![VendorGrant::Password, VendorGrant::ClientCredentials];
    let s = b.open(1_000).await;
    let Admission::New(rec) = admit(None, &verified(1_000, all), "d1", 1_000).unwrap() else {
        panic!("a new client")
    };
    assert!(s.add_client("acme-1", &rec).await.unwrap());
    drop(s);
    let s = b.open(1_000).await;
    let got = s.client("acme-1").await.unwrap().unwrap();
    assert_eq!(got, *rec, "the statement's facts survive a reopen");
    assert!(got.vendor.as_ref().unwrap().pending && !got.active);

    let activate = ClientChange::ActivateVendor {
        grants: vec![GrantKind::ClientCredentials],
        impersonate: true,
    };
    assert!(s.update_client("acme-1", activate, 1_001).await.unwrap());
    let got = s.client("acme-1").await.unwrap().unwrap();
    assert!(got.active && !got.vendor.as_ref().unwrap().pending);

    let newer = verified(1_100, vec![VendorGrant::Password]);
    let Admission::Rotated(next) = admit(Some(&got), &newer, "d2", 1_100).unwrap() else {
        panic!("a newer statement")
    };
    let restate = ClientChange::Restate(next);
    assert!(s.update_client("acme-1", restate, 1_100).await.unwrap());
    let got = s.client("acme-1").await.unwrap().unwrap();
    let v = got.vendor.as_ref().unwrap();
    assert_eq!(
        v.secret_hashes(1_200).count(),
        2,
        "both secrets in the overlap"
    );
    assert!(got.grants.is_empty(), "narrowed, never widened");

    let before = s
        .revocations(0, 1_200, usize::MAX)
        .await
        .unwrap()
        .entries
        .len();
    let revoke = ClientChange::VendorRevoke;
    assert!(s.update_client("acme-1", revoke, 1_200).await.unwrap());
    let got = s.client("acme-1").await.unwrap().unwrap();
    assert!(!got.active && got.vendor.as_ref().unwrap().revoked);
    let after = s.revocations(0, 1_200, usize::MAX).await.unwrap().entries;
    assert_eq!(after.len(), before + 1);
    assert_eq!(
        after.last().unwrap().what,
        Revoked::Client {
            id: "acme-1".into()
        }
    );
}

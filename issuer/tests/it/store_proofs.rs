//! The store conformance suite's DPoP part (run on both backends by `store.rs`'s macro): proof
//! ids accepted once until they expire, and a client's DPoP policy kept.

use crate::store::{client, Backend};

pub(crate) async fn proof_ids_are_accepted_once_until_they_expire(b: Backend) {
    let s = b.open(1_000).await;
    let (a, other) = ([1u8; 16], [2u8; 16]);
    assert!(s.first_use(&a, 1_060, 1_000).await.unwrap());
    assert!(!s.first_use(&a, 1_061, 1_001).await.unwrap());
    assert!(s.first_use(&other, 1_060, 1_001).await.unwrap());
    assert!(!s.first_use(&a, 1_120, 1_059).await.unwrap());
    assert!(
        s.first_use(&a, 1_120, 1_060).await.unwrap(),
        "expired, taken again"
    );
    assert!(!s.first_use(&a, 1_200, 1_100).await.unwrap());
    assert!(s.sweep(1_200).await.unwrap() >= 2);
    assert!(s.first_use(&other, 1_300, 1_200).await.unwrap());
    let mut strict = client(true);
    strict.dpop = issuer::store::DpopPolicy::Required;
    assert!(s.add_client("strict", &strict).await.unwrap());
    let read = s.client("strict").await.unwrap().unwrap();
    assert_eq!(read.dpop, issuer::store::DpopPolicy::Required);
}

//! The store conformance suite's DPoP part (run on both backends by `store.rs`'s macro): proof
//! ids accepted once until they expire, and a client's DPoP policy kept.

use crate::store::{client, Backend};
use shared::dpop::replay::{Accepted, Replay};

pub(crate) async fn proof_ids_are_accepted_once_until_they_expire(b: Backend) {
    let s = b.open(1_000).await;
    let proof = |id: u8, expires: u64| Accepted {
        id: [id; 16],
        key: u64::from(id),
        iat: expires - 60,
        expires,
    };
    let (a, other) = (proof(1, 1_060), proof(2, 1_060));
    assert_eq!(s.first_use(&a, 1_000).await.unwrap(), Ok(()));
    let replayed = Err(Replay::Replayed);
    let again = |expires| Accepted { expires, ..a };
    assert_eq!(s.first_use(&again(1_061), 1_001).await.unwrap(), replayed);
    assert_eq!(s.first_use(&other, 1_001).await.unwrap(), Ok(()));
    assert_eq!(s.first_use(&again(1_120), 1_059).await.unwrap(), replayed);
    assert_eq!(
        s.first_use(&again(1_120), 1_060).await.unwrap(),
        Ok(()),
        "expired, taken again"
    );
    assert_eq!(s.first_use(&again(1_200), 1_100).await.unwrap(), replayed);
    assert!(s.sweep(1_200).await.unwrap() >= 1);
    assert_eq!(s.first_use(&proof(2, 1_300), 1_200).await.unwrap(), Ok(()));
    let mut strict = client(true);
    strict.dpop = issuer::store::DpopPolicy::Required;
    assert!(s.add_client("strict", &strict).await.unwrap());
    let read = s.client("strict").await.unwrap().unwrap();
    assert_eq!(read.dpop, issuer::store::DpopPolicy::Required);
}

//! The audit trail on both backends: events recorded in batches, read from a time on in order
//! and with a limit, read newest first by page with a search, kept across a reopen, and swept
//! by age.

use super::Backend;
use issuer::store::audit::MAX_NAME_CHARS;
use issuer::store::{AuditAction, AuditEvent, AuditKey, AuditPage, Store};
use serde_json::json;

fn event(at: u64, target: &str, action: AuditAction) -> AuditEvent {
    AuditEvent::new(
        at,
        "root",
        action,
        target,
        json!({ "active": true }),
        json!({ "active": false }),
    )
}

fn encoded(events: &[AuditEvent]) -> Vec<issuer::store::EncodedEvent> {
    events.iter().map(AuditEvent::encode).collect()
}

/// The events sorted by time, then target: PostgreSQL does not order the events of one second.
fn sorted(mut events: Vec<AuditEvent>) -> Vec<AuditEvent> {
    events.sort_by(|a, b| (a.at, &a.target).cmp(&(b.at, &b.target)));
    events
}

pub(crate) async fn audit_is_recorded_read_since_and_swept(b: Backend) {
    let s = b.open(1_000).await;
    assert!(s.audit_since(0, usize::MAX).await.unwrap().is_empty());
    let first = vec![
        event(100, "a", AuditAction::ClientDeactivate),
        event(200, "b", AuditAction::UserDisable),
        event(200, "c", AuditAction::KeysRotate),
    ];
    s.record_audit(encoded(&first)).await.unwrap();
    let long = "x".repeat(5 * MAX_NAME_CHARS);
    let last = event(300, &long, AuditAction::Impersonate);
    s.record_audit(vec![last.encode()]).await.unwrap();
    s.record_audit(Vec::new()).await.unwrap();
    drop(s);

    // Durable: read back from the store opened again.
    let s = b.open(1_000).await;
    let all = s.audit_since(0, usize::MAX).await.unwrap();
    let mut expected = first.clone();
    expected.push(last.clone());
    assert!(all.windows(2).all(|w| w[0].at <= w[1].at), "{all:?}");
    assert_eq!(sorted(all), sorted(expected.clone()));
    assert_eq!(
        last.target.chars().count(),
        MAX_NAME_CHARS,
        "cut to its bound"
    );

    let since = s.audit_since(200, usize::MAX).await.unwrap();
    assert_eq!(sorted(since), sorted(expected[1..].to_vec()));
    let page = s.audit_since(0, 2).await.unwrap();
    assert_eq!(page.len(), 2);
    assert_eq!(page[0], first[0]);
    assert!(s.audit_since(301, usize::MAX).await.unwrap().is_empty());

    pages_newest_first(s.as_ref(), &expected).await;

    // The sweep deletes what was recorded before its time, and only that.
    assert_eq!(s.sweep_audit(100).await.unwrap(), 0);
    assert_eq!(s.sweep_audit(201).await.unwrap(), 3);
    assert_eq!(s.audit_since(0, usize::MAX).await.unwrap(), vec![last]);
    assert_eq!(s.sweep_audit(201).await.unwrap(), 0);
}

/// Every event of `page`'s bounds, page by page of `per`, each read going on from the last one
/// found or where the read before stopped; checks that no read returns more than `per` or more
/// than `page.scan`.
async fn every_page(s: &dyn Store, page: AuditPage<'_>, per: usize) -> Vec<AuditEvent> {
    let mut seen = Vec::new();
    let mut before: Option<AuditKey> = None;
    for _ in 0..100 {
        let read = s
            .audit_page(&AuditPage {
                before,
                limit: per,
                ..page
            })
            .await
            .unwrap();
        let got = &read.events;
        assert!(got.len() <= per.min(page.scan));
        assert!(got.windows(2).all(|w| w[0].0 > w[1].0), "newest first");
        seen.extend(got.iter().map(|(_, e)| e.clone()));
        before = match (got.last(), read.stopped_at) {
            (_, Some(stopped)) => Some(stopped),
            (Some((k, _)), None) if got.len() == per => Some(*k),
            _ => return seen,
        };
    }
    panic!("no end after 100 reads");
}

/// The events `all` (oldest first) read back newest first, whole and by page, from a time on,
/// holding a text in any case, and by reads that stop after a number of events.
async fn pages_newest_first(s: &dyn Store, all: &[AuditEvent]) {
    let whole = AuditPage {
        before: None,
        since: 0,
        text: None,
        limit: usize::MAX,
        scan: usize::MAX,
    };
    let with = |text| AuditPage {
        text: Some(text),
        ..whole
    };
    for per in [1, 2, 3, 10] {
        let got = every_page(s, whole, per).await;
        assert_eq!(got.len(), all.len(), "pages of {per}");
        assert!(got.windows(2).all(|w| w[0].at >= w[1].at), "{got:?}");
        assert_eq!(sorted(got), sorted(all.to_vec()));
    }
    let recent = every_page(
        s,
        AuditPage {
            since: 200,
            ..whole
        },
        2,
    )
    .await;
    assert_eq!(sorted(recent), sorted(all[1..].to_vec()));
    assert_eq!(every_page(s, with("user.dis"), 1).await, [all[1].clone()]);
    assert!(every_page(s, with("nothing like it"), 5).await.is_empty());
    let newest = s
        .audit_page(&AuditPage { limit: 1, ..whole })
        .await
        .unwrap();
    assert_eq!(newest.events[0].1, all[3], "the newest event first");
    let older = AuditPage {
        before: Some(newest.events[0].0),
        ..whole
    };
    assert_eq!(
        s.audit_page(&older).await.unwrap().events.len(),
        all.len() - 1
    );
    // A read stops after `scan` events and says where; the reads from there find the rest.
    let oldest = with("client.deact");
    let first = s
        .audit_page(&AuditPage {
            limit: 5,
            scan: 1,
            ..oldest
        })
        .await
        .unwrap();
    assert!(first.events.is_empty());
    assert_eq!(first.stopped_at.map(|k| k.at), Some(all[3].at));
    for scan in [1, 2, 3] {
        let found = every_page(s, AuditPage { scan, ..oldest }, 5).await;
        assert_eq!(found, [all[0].clone()], "scanning {scan} a read");
    }
    let in_one = s
        .audit_page(&AuditPage {
            limit: 5,
            scan: 4,
            ..oldest
        })
        .await
        .unwrap();
    assert_eq!((in_one.events.len(), in_one.stopped_at), (1, None));
}

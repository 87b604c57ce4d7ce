//! The audit trail on both backends: events recorded in batches, read from a time on in order
//! and with a limit, kept across a reopen, and swept by age.

use super::Backend;
use issuer::store::audit::MAX_NAME_CHARS;
use issuer::store::{AuditAction, AuditEvent};
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
    s.record_audit(&first).await.unwrap();
    let long = "x".repeat(5 * MAX_NAME_CHARS);
    let last = event(300, &long, AuditAction::Impersonate);
    s.record_audit(std::slice::from_ref(&last)).await.unwrap();
    s.record_audit(&[]).await.unwrap();
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

    // The sweep deletes what was recorded before its time, and only that.
    assert_eq!(s.sweep_audit(100).await.unwrap(), 0);
    assert_eq!(s.sweep_audit(201).await.unwrap(), 3);
    assert_eq!(s.audit_since(0, usize::MAX).await.unwrap(), vec![last]);
    assert_eq!(s.sweep_audit(201).await.unwrap(), 0);
}

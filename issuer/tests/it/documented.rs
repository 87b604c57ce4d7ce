//! What `docs/issuer.md` says about the running server, checked against it: every metric its
//! table names (but the directory's, which need a directory) is served at `/metrics`, every
//! JSON log line has the fields it promises, and a local sign-in is logged (never its password).

use super::{fixture, password_grant, refresh, Server};
use serde_json::Value;

/// The metric names of the table in `docs/issuer.md`, "Metrics".
fn documented_metrics() -> Vec<String> {
    let doc = std::fs::read_to_string(e2e::root().join("docs/issuer.md")).unwrap();
    let names: Vec<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter(|l| l.starts_with("issuer_") || l.starts_with("process_"))
        .filter_map(|l| l.split_once('`').map(|(name, _)| name.to_owned()))
        .collect();
    assert!(names.len() >= 8, "the metrics table: {names:?}");
    names
}

#[tokio::test]
async fn the_documented_metrics_and_log_fields_are_what_the_server_gives() {
    let f = fixture();
    let s = Server::start(&f.dir, &["--log-format", "json"]);
    let signed_in = password_grant(&s, &f).await;
    let rt = signed_in.json["refresh_token"].as_str().unwrap().to_owned();
    assert_eq!(refresh(&s, &f, &rt).await.status, 200);
    let url = s.token_url().replace("/apiv2/oauth/token", "/metrics");
    let metrics = reqwest::get(url).await.unwrap().text().await.unwrap();
    for name in documented_metrics() {
        if name.starts_with("issuer_directory_") {
            continue;
        }
        // OpenMetrics names a counter's family without `_total` in its TYPE line.
        let family = name.strip_suffix("_total").unwrap_or(&name);
        assert!(
            metrics.contains(&format!("# TYPE {family} ")),
            "{name} is documented but not served:\n{metrics}"
        );
    }
    assert!(metrics.contains("issuer_ready 1"), "{metrics}");
    let build = metrics
        .lines()
        .find(|l| l.starts_with("issuer_build_info{"))
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(build.ends_with(" 1"), "{build}");
    for label in ["version=\"", "revision=\"", "rustc=\""] {
        assert!(build.contains(label), "{build}");
    }
    assert!(!build.contains("=\"\""), "an empty label: {build}");
    drop(s);
    let log = std::fs::read_to_string(f.dir.with_extension("log")).unwrap();
    let lines: Vec<Value> = log
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(lines.len() >= 2, "{log}");
    for line in &lines {
        for field in ["timestamp", "level", "target", "message"] {
            assert!(line[field].is_string(), "no {field}: {line}");
        }
        let at = line["timestamp"].as_str().unwrap();
        assert!(at.ends_with('Z') && at.contains('T'), "{at}");
    }
    assert!(
        lines.iter().any(|l| l["message"] == "issuer serving"),
        "{log}"
    );
    let sign_in = lines
        .iter()
        .find(|l| l["message"] == "local sign-in")
        .unwrap_or_else(|| panic!("no local sign-in logged:\n{log}"));
    assert_eq!(sign_in["user"], "alice", "{sign_in}");
    assert_eq!(sign_in["client"], "app", "{sign_in}");
    assert_eq!(sign_in["address"], "127.0.0.1", "{sign_in}");
    assert!(!log.contains("alice-pw"), "the log shows a password");
}

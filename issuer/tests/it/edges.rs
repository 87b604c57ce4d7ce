//! The edge registry through the real issuer: edges named in the polls of an edge client, as
//! `issuer edges` and `issuer keys status` read them.

use super::*;

const NODE: &str = "mms-edge-node";
const VM: &str = "mms-edge-vm";

/// One poll of the edge feed as `client` (id, secret), naming the edge `node`/`vm` and saying it
/// holds the key ring `keys`; the answer's key ring version.
async fn poll(
    s: &Server,
    client: (&str, &str),
    node: &str,
    vm: &str,
    keys: Option<&str>,
) -> String {
    let query = keys.map(|k| format!("?keys={k}")).unwrap_or_default();
    let resp = reqwest::Client::new()
        .get(format!("{}/apiv2/oauth/edge{query}", s.url))
        .basic_auth(client.0, Some(client.1))
        .header(NODE, node)
        .header(VM, vm)
        .send()
        .await
        .unwrap();
    let a = answer(resp).await;
    assert_eq!(a.status, 200, "{}", a.json);
    a.json["keys_version"].as_str().unwrap().to_owned()
}

/// `issuer edges --json`: (client, node, vm) of every edge listed.
fn listed(dir: &Path) -> Vec<(String, String, String)> {
    admin(dir, &["edges", "--json"], None)
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let s = |f: &str| v[f].as_str().unwrap().to_owned();
            (s("client"), s("node"), s("vm"))
        })
        .collect()
}

/// Waits until the issuer wrote the polls to the store (every 2 s, all those it has at once)
/// up to the last one made, the edge `last` (client, node, VM); what `issuer edges` lists then.
async fn wait_listed(dir: &Path, last: (&str, &str, &str)) -> Vec<(String, String, String)> {
    let written = e2e::wait::until_some(e2e::wait::LONG, async || {
        let edges = listed(dir);
        let has_last =
            |e: &(String, String, String)| (e.0.as_str(), e.1.as_str(), e.2.as_str()) == last;
        edges.iter().any(has_last).then_some(edges)
    });
    written
        .await
        .unwrap_or_else(|| panic!("{last:?} never listed: {:?}", listed(dir)))
}

/// Node `a/b` VM `c` and node `a` VM `b/c` are two edges: the one that holds the key does not
/// hide the one that lacks it, and `keys status` fails naming the latter.
#[tokio::test]
async fn edges_whose_names_join_alike_are_told_apart() {
    let f = fixture();
    let secret = add_client(&f.dir, "edge", &["--edge"]);
    let s = Server::start(&f.dir, &[]);
    let edge = ("edge", secret.as_str());
    let version = poll(&s, edge, "a/b", "c", None).await;
    poll(&s, edge, "a/b", "c", Some(&version)).await;
    poll(&s, edge, "a", "b/c", None).await;
    let edges = wait_listed(&f.dir, ("edge", "a", "b/c")).await;
    assert_eq!(edges.len(), 2, "{edges:?}");
    let out = admin_output(&f.dir, &["keys", "status"], None);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(stdout.contains("lacks key"), "{stdout}");
    assert!(
        !out.status.success(),
        "keys status exits 0 while an edge lacks the key:\n{stdout}{stderr}"
    );
    assert!(stderr.contains("1 edges lack key"), "{stderr}");
    assert!(
        stderr.contains(r#""a"/"b/c""#),
        "named unambiguously: {stderr}"
    );
}

/// A flood of edge names from one edge client fills its own share of the registry: the edges of
/// another client are still recorded, and `keys status` says the flooded client is at its bound.
#[tokio::test]
async fn one_edge_client_cannot_flood_the_registry() {
    let f = fixture();
    let flood = add_client(&f.dir, "flood", &["--edge"]);
    let real = add_client(&f.dir, "real", &["--edge"]);
    let s = Server::start(&f.dir, &[]);
    let bound = issuer::store::edges::MAX_EDGES_PER_CLIENT;
    for i in 0..bound + 20 {
        poll(
            &s,
            ("flood", flood.as_str()),
            &format!("fake-{i}"),
            "vm",
            None,
        )
        .await;
    }
    let version = poll(&s, ("real", real.as_str()), "envoy-1", "vm", None).await;
    poll(&s, ("real", real.as_str()), "envoy-1", "vm", Some(&version)).await;
    // The same name as a fake's, from another client: another edge.
    poll(&s, ("real", real.as_str()), "fake-0", "vm", Some(&version)).await;
    let edges = wait_listed(&f.dir, ("real", "fake-0", "vm")).await;
    let of = |c: &str| edges.iter().filter(|e| e.0 == c).count();
    assert_eq!((of("flood"), of("real")), (bound, 2));
    let out = admin_output(&f.dir, &["keys", "status"], None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "fakes lack the key");
    assert!(stderr.contains("at their bound of 256 edges"), "{stderr}");
    assert!(stderr.contains(": flood ("), "{stderr}");
}

//! The cluster the filter polls the edge feed on (`edge_sync.cluster`) must be a cluster of the
//! same Envoy configuration: Envoy does not check it (`envoy --mode validate` says OK), and a
//! running Envoy then answers 503 to every request with a token, its filter never having had a
//! feed answer. Here, read from the configuration's text: the clusters it defines
//! (`static_resources.clusters`), the plugin configurations (the JSON under `value: |`) and the
//! `edge_sync` objects its comments show; and the `edge_sync` object `docs/deploy-envoy.md` tells
//! operators to add, so that every configuration with the issuer behind it is checked with edge
//! sync on, as it is recommended to run.

use crate::root;
use anyhow::{bail, Context, Result};
use serde_json::Value;

/// Indentation of `line`, in spaces.
fn indent(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// The names of the clusters the configuration `yaml` defines (`static_resources.clusters`),
/// read from its text: each item of the first top-most `clusters:` list, by its `name` key.
pub fn defined_clusters(yaml: &str) -> Vec<String> {
    let lines: Vec<&str> = yaml.lines().collect();
    let Some(start) = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.trim() == "clusters:")
        .min_by_key(|(_, l)| indent(l))
        .map(|(i, _)| i)
    else {
        return Vec::new();
    };
    let list_indent = indent(lines[start]);
    let mut item_indent = None;
    let mut names = Vec::new();
    for line in &lines[start + 1..] {
        let text = line.trim();
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        let at = indent(line);
        if at < list_indent || (at == list_indent && !text.starts_with("- ")) {
            break;
        }
        let item = *item_indent.get_or_insert(at);
        let key = match text.strip_prefix("- ") {
            Some(first) if at == item => first,
            _ if at == item + 2 => text,
            _ => continue,
        };
        if let Some(name) = key.strip_prefix("name:") {
            let name = name.split(" #").next().unwrap_or_default();
            names.push(name.trim().trim_matches('"').to_owned());
        }
    }
    names
}

/// The plugin configurations of `yaml`: the JSON of each `value: |` block, parsed.
pub fn filter_configs(yaml: &str) -> Result<Vec<Value>> {
    let mut configs = Vec::new();
    let mut lines = yaml.lines().peekable();
    while let Some(line) = lines.next() {
        if !line.trim_end().ends_with("value: |") {
            continue;
        }
        let block_indent = indent(line) + 2;
        let mut json = String::new();
        while let Some(l) = lines.next_if(|l| l.trim().is_empty() || indent(l) >= block_indent) {
            json.push_str(l);
            json.push('\n');
        }
        configs
            .push(serde_json::from_str(&json).context("a plugin configuration that is not JSON")?);
    }
    Ok(configs)
}

/// The clusters `edge_sync` names in `yaml`: in its plugin configurations, and in its comments
/// that show an `"edge_sync": {"cluster": "NAME", …}` to add.
pub fn feed_clusters(yaml: &str) -> Result<Vec<String>> {
    let mut clusters: Vec<String> = filter_configs(yaml)?
        .iter()
        .filter_map(|c| c["edge_sync"]["cluster"].as_str().map(str::to_owned))
        .collect();
    for comment in yaml.lines().filter(|l| l.trim_start().starts_with('#')) {
        let Some((_, sync)) = comment.split_once("\"edge_sync\"") else {
            continue;
        };
        let named = sync
            .split_once("\"cluster\"")
            .and_then(|(_, rest)| rest.split('"').nth(1));
        match named {
            Some(cluster) => clusters.push(cluster.to_owned()),
            None => bail!("a comment shows edge_sync without its cluster: {comment}"),
        }
    }
    Ok(clusters)
}

/// Fails unless every cluster `edge_sync` names in `yaml` ([`feed_clusters`]) is one it defines
/// ([`defined_clusters`]); returns the clusters named.
pub fn check_feed_clusters(yaml: &str) -> Result<Vec<String>> {
    let defined = defined_clusters(yaml);
    let named = feed_clusters(yaml)?;
    for cluster in &named {
        if !defined.contains(cluster) {
            bail!(
                "edge_sync names the cluster {cluster:?}, which this configuration does not \
                 define (it defines {defined:?}): every request with a token would get 503"
            );
        }
    }
    Ok(named)
}

/// The `edge_sync` object `docs/deploy-envoy.md` ("Edge sync") tells operators to add to the
/// plugin configuration: the ```json block that holds `"edge_sync"`.
pub fn documented_edge_sync() -> Result<Value> {
    let doc = std::fs::read_to_string(root().join("docs/deploy-envoy.md"))?;
    let block = doc
        .split("```json\n")
        .skip(1)
        .filter_map(|rest| rest.split_once("```").map(|(block, _)| block))
        .find(|block| block.contains("\"edge_sync\""))
        .context("docs/deploy-envoy.md shows no edge_sync to add")?;
    let object: Value = serde_json::from_str(&format!("{{{block}}}"))
        .context("the edge_sync of docs/deploy-envoy.md is not JSON")?;
    Ok(object["edge_sync"].clone())
}

/// `yaml` with `edge_sync` added to its plugin configuration, as an operator following
/// `docs/deploy-envoy.md` adds it; `None` when the configuration has no issuer behind it (no
/// `issuer` cluster: `envoy/minimal.yaml`) or no filter, which has no feed to poll.
pub fn with_edge_sync(yaml: &str, edge_sync: &Value) -> Result<Option<String>> {
    if !defined_clusters(yaml).iter().any(|c| c == "issuer") {
        return Ok(None);
    }
    // A configuration without the filter (docs/issuer.md's health check) has nothing to poll.
    let Some(mut config) = filter_configs(yaml)?.into_iter().next() else {
        return Ok(None);
    };
    config["edge_sync"] = edge_sync.clone();
    let json = serde_json::to_string_pretty(&config)?;
    crate::envoy::render(yaml, &[], &json).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"static_resources:
  listeners:
  - name: l
    filter_chains:
    - filters:
      - name: f
        typed_config:
          # add "edge_sync": {"cluster": "issuer_feed", "client_id": "e"} for edge sync
          configuration:
            value: |
              {"keys": [], "edge_sync": {"cluster": "issuer_feed"}}
  clusters:
  # the issuer
  - name: issuer
    type: STATIC
    load_assignment:
      cluster_name: not_a_cluster
  - type: STATIC
    name: "media"
"#;

    #[test]
    fn clusters_and_the_feed_cluster_are_read_from_the_text() {
        assert_eq!(defined_clusters(SAMPLE), ["issuer", "media"]);
        assert_eq!(
            feed_clusters(SAMPLE).unwrap(),
            ["issuer_feed", "issuer_feed"]
        );
        let err = check_feed_clusters(SAMPLE).unwrap_err().to_string();
        assert!(err.contains("\"issuer_feed\""), "{err}");
        let fixed = SAMPLE.replace(
            "  - name: issuer\n",
            "  - name: issuer_feed\n  - name: issuer\n",
        );
        assert_eq!(check_feed_clusters(&fixed).unwrap().len(), 2);
    }

    /// Without Envoy: every shipped configuration and every whole configuration the docs show,
    /// with edge sync added as `docs/deploy-envoy.md` says, defines the cluster it polls.
    /// (`stack validate` checks the same files with `envoy --mode validate` too.)
    #[test]
    fn every_configuration_defines_the_cluster_edge_sync_polls() {
        let edge_sync = documented_edge_sync().unwrap();
        assert!(edge_sync["cluster"].is_string(), "{edge_sync}");
        let mut with_issuer = 0;
        for (name, yaml) in crate::envoy::configs_to_check().unwrap() {
            check_feed_clusters(&yaml).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            if let Some(synced) = with_edge_sync(&yaml, &edge_sync).unwrap() {
                let named = check_feed_clusters(&synced)
                    .unwrap_or_else(|e| panic!("{name} with edge_sync: {e:#}"));
                assert!(!named.is_empty(), "{name}");
                with_issuer += 1;
            }
        }
        // full-stack.yaml, native.yaml and the whole file of docs/deploy-envoy.md.
        assert!(
            with_issuer >= 3,
            "{with_issuer} configurations with an issuer"
        );
    }

    /// Every filter configuration shipped or shown whole in the docs names the origin its DPoP
    /// proofs are checked against: without it the filter does not load.
    #[test]
    fn every_configuration_names_its_public_origin() {
        let mut filters = 0;
        for (name, yaml) in crate::envoy::configs_to_check().unwrap() {
            for config in filter_configs(&yaml).unwrap() {
                let origin = config["dpop"]["public_origin"].as_str().unwrap_or_default();
                assert!(origin.starts_with("http"), "{name}: {config}");
                filters += 1;
            }
        }
        assert!(
            filters >= 5,
            "{filters}: envoy/*.yaml and docs/deploy-envoy.md"
        );
    }
}

//! Envoy in the harness: the shipped configurations rendered for a test's ports and key ring,
//! started and awaited, validated, and read through the admin interface, which the shipped
//! configuration serves on the Unix socket `admin.sock` (mode 0600) in Envoy's directory.

use crate::{ensure_tls, root, write_private, Proc, Tools};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// File name of Envoy's admin socket, relative to the directory Envoy runs in.
pub const ADMIN_SOCKET: &str = "admin.sock";

/// Ports of one stack.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    /// Envoy's TLS listener.
    pub listener: u16,
    /// The issuer.
    pub issuer: u16,
    /// The media upstream.
    pub media: u16,
}

impl Ports {
    /// The ports the shipped configuration uses.
    pub const SHIPPED: Ports = Ports {
        listener: 8443,
        issuer: 8080,
        media: 8081,
    };

    /// Fresh free ports.
    pub fn free() -> Self {
        Self {
            listener: crate::free_port(),
            issuer: crate::free_port(),
            media: crate::free_port(),
        }
    }
}

/// Where the shipped full-stack configurations reach the issuer (both issuer clusters): the
/// Unix socket of the Debian package (`listen = "unix:/run/issuer/http.sock"`).
pub const SHIPPED_ISSUER_SOCKET: &str = "/run/issuer/http.sock";

/// The endpoint address of the shipped issuer clusters, as the files write it.
fn shipped_issuer_pipe() -> String {
    format!("pipe: {{ path: {SHIPPED_ISSUER_SOCKET} }}")
}

/// The shipped full-stack configuration of the tools' filter (`envoy/full-stack.yaml`, or
/// `envoy/native.yaml`) with its ports replaced and the plugin configuration replaced by
/// `filter_config` (the output of `issuer keys filter-config`), exactly as an operator drops it
/// in: the JSON goes under `value: |`, indented to the block's column. The issuer clusters,
/// shipped on the Unix socket, point at the issuer on 127.0.0.1:`ports.issuer` instead: the
/// harness's issuers listen on TCP, so that tests can also reach them directly
/// ([`render_full_stack_on_socket`] keeps the socket).
pub fn render_full_stack(tools: &Tools, ports: Ports, filter_config: &str) -> Result<String> {
    let tcp = format!(
        "socket_address: {{ address: 127.0.0.1, port_value: {} }}",
        ports.issuer
    );
    render_issuer_at(tools, ports, &tcp, filter_config)
}

/// [`render_full_stack`] with the issuer clusters on the Unix socket `socket`, as shipped.
pub fn render_full_stack_on_socket(
    tools: &Tools,
    ports: Ports,
    socket: &Path,
    filter_config: &str,
) -> Result<String> {
    let pipe = format!("pipe: {{ path: {} }}", socket.display());
    render_issuer_at(tools, ports, &pipe, filter_config)
}

/// The shipped full-stack configuration with `issuer` (an endpoint address) in both issuer
/// clusters; fails if the shipped file does not point them at [`SHIPPED_ISSUER_SOCKET`].
fn render_issuer_at(
    tools: &Tools,
    ports: Ports,
    issuer: &str,
    filter_config: &str,
) -> Result<String> {
    let file = tools.full_stack_config();
    let shipped = std::fs::read_to_string(root().join(file))?;
    let pipe = shipped_issuer_pipe();
    if shipped.matches(&pipe).count() != 2 {
        bail!("{file}: the issuer clusters do not both point at `{pipe}`");
    }
    let ports = [
        (Ports::SHIPPED.listener, ports.listener),
        (Ports::SHIPPED.media, ports.media),
    ];
    render(&shipped.replace(&pipe, issuer), &ports, filter_config)
}

/// The shipped minimal configuration of the tools' filter (`envoy/minimal.yaml`, or
/// `envoy/minimal-native.yaml`: plain HTTP, no issuer route) with its listener on `listener`, its
/// media upstream on `media` and this plugin configuration.
pub fn render_minimal(
    tools: &Tools,
    listener: u16,
    media: u16,
    filter_config: &str,
) -> Result<String> {
    let shipped = std::fs::read_to_string(root().join(tools.minimal_config()))?;
    render(
        &shipped,
        &[(10000, listener), (Ports::SHIPPED.media, media)],
        filter_config,
    )
}

/// Adds the issuer on `port` beside the one on `first`, in every cluster that holds that one (the
/// `issuer` cluster and the edge feed's `issuer_feed`): a rendered full-stack configuration with
/// several issuers on one PostgreSQL.
pub fn add_issuer_endpoint(yaml: &str, first: u16, port: u16) -> Result<String> {
    let line =
        format!("              socket_address: {{ address: 127.0.0.1, port_value: {first} }}");
    if !yaml.contains(&line) {
        bail!("no issuer endpoint on port {first}");
    }
    let endpoint = format!(
        "\n        - endpoint:\n            address:\n              socket_address: {{ address: 127.0.0.1, port_value: {port} }}"
    );
    Ok(yaml.replace(&line, &format!("{line}{endpoint}")))
}

/// Replaces `port_value: FROM` with `port_value: TO` and the plugin configuration block.
pub fn render(config: &str, ports: &[(u16, u16)], filter_config: &str) -> Result<String> {
    let mut out = String::with_capacity(config.len() + filter_config.len());
    let mut lines = config.lines().peekable();
    let mut replaced = false;
    while let Some(line) = lines.next() {
        let mut line = line.to_owned();
        for (from, to) in ports {
            line = line.replace(
                &format!("port_value: {from} "),
                &format!("port_value: {to} "),
            );
        }
        out.push_str(&line);
        out.push('\n');
        if line.trim_end().ends_with("value: |") {
            let indent = line.len() - line.trim_start().len() + 2;
            while lines
                .peek()
                .is_some_and(|l| l.trim().is_empty() || l.len() - l.trim_start().len() >= indent)
            {
                lines.next();
            }
            for json_line in filter_config.trim_end().lines() {
                out.push_str(&" ".repeat(indent));
                out.push_str(json_line);
                out.push('\n');
            }
            replaced = true;
        }
    }
    if !replaced {
        bail!("no `value: |` block for the plugin configuration");
    }
    Ok(out)
}

/// Writes `yaml` to `dir/name` with mode 0600 (it holds the filter's keys) and returns the path.
pub fn write_config(dir: &Path, name: &str, yaml: &str) -> Result<std::path::PathBuf> {
    let path = dir.join(name);
    write_private(&path, yaml.as_bytes())?;
    Ok(path)
}

/// The node id of the Envoy listening on `listener` (`--service-node`).
pub fn node_name(listener: u16) -> String {
    format!("e2e-envoy-{listener}")
}

/// Starts Envoy with `workers` worker threads on `config` in `dir` (which holds filter.wasm and
/// tls/) and waits until it is ready: through its admin socket in `dir` when the configuration has
/// one, and until `listener` accepts connections.
pub fn start_envoy(
    tools: &Tools,
    dir: &Path,
    config: &Path,
    listener: u16,
    workers: u32,
    log: &Path,
) -> Result<Proc> {
    start_envoy_on(tools, dir, config, listener, workers, None, log)
}

/// [`start_envoy`], pinned to the CPUs `pin` (a `taskset` list) when given: the benchmarks keep
/// Envoy and the load generator on cores of their own.
pub fn start_envoy_on(
    tools: &Tools,
    dir: &Path,
    config: &Path,
    listener: u16,
    workers: u32,
    pin: Option<&str>,
    log: &Path,
) -> Result<Proc> {
    let mut command = crate::command_on(&tools.envoy, pin);
    command.arg("--disable-hot-restart");
    launch_envoy(command, dir, config, listener, workers, log)
}

/// How an Envoy of a hot-restart sequence starts, as `docs/deploy-envoy.md` ("A hot restart")
/// does it: each epoch one more than the last, on one base id. Epoch 0 lets Envoy pick a free
/// base id and write it to `base_id_file` (tests run side by side); later epochs read it.
#[derive(Debug, Clone)]
pub struct HotRestart {
    /// The restart epoch: 0 for the first start.
    pub epoch: u32,
    /// Where epoch 0 writes the base id, and later epochs read it.
    pub base_id_file: PathBuf,
    /// `--drain-time-s`: how long the old process drains its connections.
    pub drain_seconds: u32,
    /// `--parent-shutdown-time-s`: when the new process tells the old one to exit.
    pub parent_shutdown_seconds: u32,
}

/// [`start_envoy`] as one epoch of a hot-restart sequence: with a later epoch, the new process
/// takes the listeners over from the running one, which drains and exits by itself.
pub fn start_envoy_epoch(
    tools: &Tools,
    dir: &Path,
    config: &Path,
    listener: u16,
    workers: u32,
    restart: &HotRestart,
    log: &Path,
) -> Result<Proc> {
    let mut command = Command::new(&tools.envoy);
    command.args(["--restart-epoch", &restart.epoch.to_string()]);
    if restart.epoch == 0 {
        command
            .arg("--use-dynamic-base-id")
            .arg("--base-id-path")
            .arg(&restart.base_id_file);
    } else {
        let id = std::fs::read_to_string(&restart.base_id_file)
            .with_context(|| format!("reading {}", restart.base_id_file.display()))?;
        command.args(["--base-id", id.trim()]);
    }
    command
        .args(["--drain-time-s", &restart.drain_seconds.to_string()])
        .args([
            "--parent-shutdown-time-s",
            &restart.parent_shutdown_seconds.to_string(),
        ]);
    launch_envoy(command, dir, config, listener, workers, log)
}

/// Fails when this process is the test binary [`crate::BINARY_WITHOUT_ENVOY`] (cargo names a
/// test executable after its target, then a hash): its tests run against the Wasm filter only.
fn refuse_without_envoy() -> Result<()> {
    let exe = std::env::current_exe().unwrap_or_default();
    refuse_in_binary(&exe.file_name().unwrap_or_default().to_string_lossy())
}

fn refuse_in_binary(exe: &str) -> Result<()> {
    let without = crate::BINARY_WITHOUT_ENVOY;
    if exe == without || exe.starts_with(&format!("{without}-")) {
        bail!(
            "a test in {without} starts Envoy: move it to tests/through_envoy/ so that the native \
             filter's run covers it too"
        );
    }
    Ok(())
}

/// Runs `command` (Envoy, or a wrapper that execs it, with its restart arguments) on `config`
/// and waits until it is ready, as [`start_envoy`] says.
fn launch_envoy(
    mut command: Command,
    dir: &Path,
    config: &Path,
    listener: u16,
    workers: u32,
    log: &Path,
) -> Result<Proc> {
    refuse_without_envoy()?;
    let admin = dir.join(ADMIN_SOCKET);
    let _ = std::fs::remove_file(&admin);
    let has_admin = std::fs::read_to_string(config)?.contains(ADMIN_SOCKET);
    let child = command
        .current_dir(dir)
        // Where the native filter's library is (Envoy's default is the directory it runs in).
        .env("ENVOY_DYNAMIC_MODULES_SEARCH_PATH", dir)
        .arg("-c")
        .arg(config)
        .args(["--log-level", "warn", "--concurrency"])
        .arg(workers.to_string())
        // At info, Envoy says whether a native module's ABI version is its own (see abi_check).
        .args(["--component-log-level", "dynamic_modules:info"])
        // The node id edges report to the issuer (`issuer edges`), as an operator sets it.
        .args(["--service-node", &node_name(listener)])
        .stdout(Stdio::null())
        .stderr(Stdio::from(crate::private_log(log)?))
        .spawn()
        .context("starting envoy")?;
    let mut proc = Proc::new(child, "envoy");
    let read_log = || std::fs::read_to_string(log).unwrap_or_default();
    let ready = crate::wait::until_ok_blocking(Duration::from_secs(60), || {
        if let Some(status) = proc.exited() {
            bail!("envoy exited with {status}: {}", read_log());
        }
        let ready = (!has_admin || admin_get(&admin, "/ready").is_ok_and(|(s, _)| s == 200))
            && std::net::TcpStream::connect(("127.0.0.1", listener)).is_ok();
        Ok(ready.then_some(()))
    })?;
    let checked = match ready {
        Some(()) => abi_check(&read_log()),
        None => Err(anyhow::anyhow!(
            "envoy did not become ready: {}",
            read_log()
        )),
    };
    if checked.is_err() {
        proc.stop();
    }
    checked.map(|()| proc)
}

/// What Envoy says when it loads a native module built for its own ABI version (the filter's
/// `native::abi::ABI_VERSION`).
pub const ABI_MATCHED: &str = "Dynamic module ABI version v0.2.0 matched.";

/// Fails if the Envoy log `log` says a native module was built for another ABI version than the
/// Envoy that loaded it (Envoy itself only warns, and loads it anyway).
pub fn abi_check(log: &str) -> Result<()> {
    match log
        .lines()
        .find(|l| l.contains("Dynamic module ABI version") && !l.contains(ABI_MATCHED))
    {
        Some(line) => bail!("the native filter does not speak this Envoy's ABI: {line}"),
        None => Ok(()),
    }
}

/// Waits until `vms` filter VMs of the Envoy with the admin socket `sock` have had their first good
/// answer from the edge feed (the counter `edge_sync_first_ok` counts one per VM), at most 30 s.
pub fn wait_for_first_answers(sock: &Path, vms: u64) -> Result<()> {
    let synced = || -> Result<u64> {
        let (_, text) = admin_get(sock, "/stats?filter=mms_auth.edge_sync_first_ok")?;
        Ok(text
            .lines()
            .filter_map(|l| l.split_once(": "))
            .find(|(name, _)| name.ends_with("mms_auth.edge_sync_first_ok"))
            .and_then(|(_, v)| v.trim().parse::<u64>().ok())
            .unwrap_or(0))
    };
    let all = crate::wait::until_ok_blocking(Duration::from_secs(30), || {
        Ok((synced()? >= vms).then_some(()))
    })?;
    if all.is_none() {
        let synced = synced()?;
        bail!("{synced} of {vms} filter VMs had a first answer from edge sync after 30 s");
    }
    Ok(())
}

/// A GET to Envoy's admin interface on the Unix socket `sock`: the status and the body.
pub fn admin_get(sock: &Path, path: &str) -> Result<(u16, String)> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let (status, body) = crate::http1::exchange_unix(sock, &request)?;
    Ok((status, String::from_utf8(body)?))
}

/// The ```yaml blocks of a Markdown text, each without the indentation of its fence (a block in
/// a list item is indented with it).
fn yaml_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for line in text.lines() {
        let spaces = line.bytes().take_while(|b| *b == b' ').count();
        match &mut open {
            None if line.trim() == "```yaml" => open = Some((spaces, String::new())),
            None => {}
            Some((_, block)) if line.trim() == "```" => {
                blocks.push(std::mem::take(block));
                open = None;
            }
            Some((fence, block)) => {
                let cut = spaces.min(*fence);
                block.push_str(&line[cut..]);
                block.push('\n');
            }
        }
    }
    blocks
}

/// The whole Envoy configurations the docs show (```yaml blocks holding `static_resources:`), as
/// (`docs/FILE.md#N`, the YAML), the N-th such block of the file.
fn documented_configs() -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut docs: Vec<_> = std::fs::read_dir(root().join("docs"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    for doc in docs {
        let text = std::fs::read_to_string(&doc)?;
        let name = doc.file_name().unwrap_or_default().to_string_lossy();
        let configs = yaml_blocks(&text)
            .into_iter()
            .filter(|yaml| yaml.contains("static_resources:"));
        for (i, yaml) in configs.enumerate() {
            out.push((format!("docs/{name}#{}", i + 1), yaml));
        }
    }
    Ok(out)
}

/// `envoy --mode validate -c CONFIG`, run in the directory `config` is in (as the running Envoy
/// would, with its relative paths); fails with Envoy's words unless it says OK.
pub fn validate(tools: &Tools, config: &Path) -> Result<()> {
    let dir = config.parent().context("a config file in a directory")?;
    validate_in(tools, dir, config)
}

fn validate_in(tools: &Tools, dir: &Path, config: &Path) -> Result<()> {
    let out = Command::new(&tools.envoy)
        .current_dir(dir)
        .args(["--mode", "validate", "--disable-hot-restart", "-c"])
        .arg(config)
        .output()?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if !out.status.success() || !text.contains("OK") {
        bail!("{text}");
    }
    Ok(())
}

/// Every shipped configuration (the files of `envoy/`) and every whole configuration the docs
/// show, as (a name, its text).
pub fn configs_to_check() -> Result<Vec<(String, String)>> {
    let mut files: Vec<_> = std::fs::read_dir(root().join("envoy"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|f| f.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("no configuration in envoy/");
    }
    let mut configs = Vec::new();
    for f in files {
        let name = format!(
            "envoy/{}",
            f.file_name().unwrap_or_default().to_string_lossy()
        );
        configs.push((name, std::fs::read_to_string(&f)?));
    }
    let documented = documented_configs()?;
    if documented.is_empty() {
        bail!("no whole Envoy configuration in docs/ (docs/deploy-envoy.md shows one)");
    }
    configs.extend(documented);
    Ok(configs)
}

/// Validates every file of `envoy/` with `envoy --mode validate`, as shipped, and every whole
/// configuration the docs show, in a directory set up as they expect (filter.wasm,
/// libmms_auth.so and tls/ beside them). Each with the issuer behind it is validated again with
/// edge sync added as `docs/deploy-envoy.md` says, and each must define the cluster its
/// `edge_sync` polls, which Envoy does not check ([`crate::feed_cluster`]). Returns what was
/// checked.
pub fn validate_shipped_configs(tools: &Tools) -> Result<Vec<String>> {
    let dir = tempfile::tempdir()?;
    ensure_tls(dir.path())?;
    std::fs::copy(&tools.wasm, dir.path().join("filter.wasm"))?;
    // envoy/native.yaml loads the native filter: validation loads it too.
    let native = match &tools.filter {
        crate::Filter::Native(lib) => lib.clone(),
        crate::Filter::Wasm => std::env::var_os("MMS_NATIVE_MODULE")
            .map(PathBuf::from)
            .context("MMS_NATIVE_MODULE is not set: envoy/native.yaml needs the native filter")?,
    };
    std::fs::copy(&native, dir.path().join(crate::NATIVE_LIBRARY))
        .with_context(|| format!("copying {}", native.display()))?;
    let edge_sync = crate::feed_cluster::documented_edge_sync()?;
    let mut checked = Vec::new();
    for (i, (name, yaml)) in configs_to_check()?.into_iter().enumerate() {
        let synced = crate::feed_cluster::with_edge_sync(&yaml, &edge_sync)?;
        let variants = [
            (name.clone(), Some(yaml)),
            (format!("{name} with edge_sync"), synced),
        ];
        for (j, (name, yaml)) in variants.into_iter().enumerate() {
            let Some(yaml) = yaml else { continue };
            let path = dir.path().join(format!("config-{i}-{j}.yaml"));
            write_private(&path, yaml.as_bytes())?;
            validate_in(tools, dir.path(), &path)
                .with_context(|| format!("{name} does not validate"))?;
            crate::feed_cluster::check_feed_clusters(&yaml).with_context(|| name.clone())?;
            checked.push(name);
        }
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_of_another_abi_version_fails_the_start() {
        let at = "[2026-11-24 10:00:00.000][7][info][dynamic_modules] [source/extensions/dynamic_modules/posix/dynamic_modules.cc:122]";
        assert!(abi_check(&format!("{at} {ABI_MATCHED}\n")).is_ok());
        assert!(abi_check("no module loaded\n").is_ok());
        let other = "[2026-11-24 10:00:00.000][7][warning][dynamic_modules] [source/extensions/dynamic_modules/posix/dynamic_modules.cc:119] Dynamic module ABI version v0.1.0 is deprecated. Please recompile the module against the SDK with the exact Envoy version used by the main program.";
        let err = abi_check(&format!("{other}\n")).unwrap_err().to_string();
        assert!(err.contains("v0.1.0 is deprecated"), "{err}");
    }

    #[test]
    fn the_binary_without_envoy_cannot_start_it() {
        let err = refuse_in_binary("without_envoy-0123abcd")
            .unwrap_err()
            .to_string();
        assert!(err.contains("move it to tests/through_envoy/"), "{err}");
        assert!(refuse_in_binary("without_envoy").is_err());
        assert!(refuse_in_binary("through_envoy-0123abcd").is_ok());
        assert!(refuse_in_binary("e2e-0123abcd").is_ok());
        assert!(refuse_in_binary("stack").is_ok());
    }
}

//! SIGHUP: the issuer reads its configuration file again and never stops. The log level and the
//! TLS certificate change in place, other changed options are named as waiting for a restart, and
//! a file that no longer parses changes nothing.

use super::*;
use std::io::{BufRead, BufReader};

/// A new self-signed certificate for `localhost`, written to `cert` and `key` (0600): its PEM.
pub(crate) fn certificate(cert: &Path, key: &Path) -> String {
    let c = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    std::fs::write(cert, c.cert.pem()).unwrap();
    e2e::write_private(key, c.key_pair.serialize_pem().as_bytes()).unwrap();
    c.cert.pem()
}

pub(crate) fn config(f: &Fixture, cert: &Path, key: &Path, rest: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\ndata_dir = {:?}\ntls_cert = {:?}\ntls_key = {:?}\n{rest}",
        f.dir.display().to_string(),
        cert.display().to_string(),
        key.display().to_string()
    )
}

/// `issuer serve --config FILE` with no `RUST_LOG` (which would win over `log_level`): the
/// process and its port.
pub(crate) fn serve(config: &Path, log: &Path) -> (Proc, String) {
    let mut child = Command::new(BIN)
        .args(["serve", "--config", config.to_str().unwrap()])
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let proc = Proc::new(child, "issuer");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let url = line.trim().strip_prefix("listening on https://").unwrap();
    (proc, url.rsplit(':').next().unwrap().to_owned())
}

/// Sends SIGHUP to `proc`, then waits for the log's `count`-th line holding `done`.
pub(crate) fn hup_and_wait(proc: &Proc, log: &Path, done: &str, count: usize) -> String {
    let pid = proc.pid().to_string();
    assert!(Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap()
        .success());
    let read = || std::fs::read_to_string(log).unwrap();
    let logged = e2e::wait::until_some_blocking(e2e::wait::LONG, || {
        Some(read()).filter(|text| text.matches(done).count() >= count)
    });
    logged.unwrap_or_else(|| panic!("no {done:?} after SIGHUP:\n{}", read()))
}

/// A client credentials grant over a new connection trusting only `pem`: the token's lifetime,
/// or the error.
pub(crate) async fn grant(f: &Fixture, port: &str, pem: &str) -> Result<u64, String> {
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(pem.as_bytes()).unwrap())
        .tls_built_in_root_certs(false)
        .resolve("localhost", format!("127.0.0.1:{port}").parse().unwrap())
        .build()
        .unwrap();
    let resp = client
        .post(format!("https://localhost:{port}/apiv2/oauth/token"))
        .basic_auth("app", Some(&f.secret))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .map_err(|e| format!("{e:?}"))?;
    let a = answer(resp).await;
    assert_eq!(a.status, 200, "{}", a.json);
    Ok(a.json["expires_in"].as_u64().unwrap())
}

#[tokio::test]
async fn sighup_reloads_the_log_level_and_the_certificate_and_never_stops_the_issuer() {
    let f = fixture();
    let (cert, key) = (f.dir.with_extension("crt"), f.dir.with_extension("key"));
    let first = certificate(&cert, &key);
    let file = f.dir.with_file_name("issuer.toml");
    let log = f.dir.with_extension("log");
    std::fs::write(
        &file,
        config(&f, &cert, &key, "log_level = \"warn\"\naccess_ttl = 77\n"),
    )
    .unwrap();
    let (proc, port) = serve(&file, &log);
    assert_eq!(grant(&f, &port, &first).await, Ok(77));
    let quiet = std::fs::read_to_string(&log).unwrap();
    assert!(
        !quiet.contains("issuer serving"),
        "INFO logged at warn:\n{quiet}"
    );

    let second = certificate(&cert, &key);
    std::fs::write(
        &file,
        config(&f, &cert, &key, "log_level = \"info\"\naccess_ttl = 88\n"),
    )
    .unwrap();
    let text = hup_and_wait(&proc, &log, "reload done", 1);
    assert!(text.contains("log level changed"), "{text}");
    assert!(text.contains("take effect at the next restart"), "{text}");
    assert!(text.contains("access_ttl"), "{text}");
    assert_eq!(
        grant(&f, &port, &second).await,
        Ok(77),
        "access_ttl waits for a restart"
    );
    let old = grant(&f, &port, &first).await;
    assert!(
        old.is_err(),
        "a new connection still got the old certificate: {old:?}"
    );

    std::fs::write(&file, "access_ttl = \n").unwrap();
    let text = hup_and_wait(&proc, &log, "reload refused", 1);
    assert!(
        !text.contains("access_ttl = "),
        "the file's text is never logged"
    );
    assert_eq!(
        grant(&f, &port, &second).await,
        Ok(77),
        "a bad file changes nothing"
    );
    hup_and_wait(&proc, &log, "reload refused", 2);
    assert!(e2e::alive(proc.pid()), "SIGHUP stopped the issuer");
}

//! A revocation another issuer of a PostgreSQL store recorded counts at the admin listener at
//! once: each request reads the store's latest revocation (`App::revoked_now`), whatever the
//! issuer's own reads (each second, and at PostgreSQL's notifications) have seen.

use super::*;
use e2e::postgres::PgCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: `cargo xtask test` runs it"]
async fn a_revocation_recorded_elsewhere_counts_at_once() {
    let pg = PgCluster::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let (store, secret) = crate::multi::provision(&pg, tmp.path(), "password");
    let dir = tmp.path().join("admin");
    let mut args = vec!["user", "add", "root", "--role", "admin:read"];
    args.extend(store.iter().map(String::as_str));
    admin(&dir, &args, Some(PW));
    let config = format!(
        "store = {:?}\nkek_file = {:?}\nlisten = \"127.0.0.1:0\"\n\
         [admin_http]\nlisten = \"127.0.0.1:0\"\nclients = [\"app\"]\n",
        store[1], store[3]
    );
    let secrets = [("app", secret)].into_iter().collect();
    let s = serve(tmp, dir, &config, secrets);
    let root = s.sign_in("root").await;
    let a = s.call(&root, "GET", "/apiv2/admin/me", None, None).await;
    assert_eq!(a.status, 200, "{}", a.json);
    // Recorded straight in the database with its triggers off (no notification), as by another
    // issuer whose notification has not arrived yet: root's tokens are revoked.
    let (at, until) = (now(), now() + 600);
    pg.psql(&format!(
        "SET session_replication_role = replica; \
         INSERT INTO settings (name, value) VALUES ('revocation_seq', 1) \
         ON CONFLICT (name) DO UPDATE SET value = settings.value + 1; \
         INSERT INTO revocations (seq, entry, until, stamp) \
         SELECT value, json_build_object('seq', value, 'what', \
         json_build_object('kind', 'user', 'name', 'root'), 'at', {at}, 'until', {until})::text, \
         {until}, 7 FROM settings WHERE name = 'revocation_seq'"
    ))
    .unwrap();
    let a = s.call(&root, "GET", "/apiv2/admin/me", None, None).await;
    assert_eq!(a.status, 401, "{}", a.json);
    assert_eq!(a.json["error_description"], "the token is revoked");
}

//! The throwaway directory servers (`crate::slapd`, OpenLDAP, and `crate::samba`, a Samba AD domain
//! controller) themselves, driven by the ldap-utils clients as any client would: users bind over
//! `ldaps://` and StartTLS with the test CA verified, wrong passwords and other CAs are refused,
//! group membership shows as the product will read it (`memberOf` on OpenLDAP, nested groups by
//! `LDAP_MATCHING_RULE_IN_CHAIN` on AD), a killed OpenLDAP restarts in place, two servers hold
//! the same entries, and nothing (process, port, dir) is left behind.

use crate::directory::values;
use crate::{alive, port_open};
use crate::{LdapClient, SambaDc, Slapd};
use std::path::Path;
use std::time::Instant;

/// `ldapwhoami` as `dn` with `password` through `client`: the DN the server says we are.
fn whoami(client: LdapClient, dn: &str, password: &str) -> anyhow::Result<String> {
    let out = client.bind(dn, password).run("ldapwhoami", &[], None)?;
    Ok(out.trim().to_owned())
}

#[test]
#[ignore = "needs slapd: `cargo xtask test` runs it"]
fn slapd_binds_users_over_ldaps_and_starttls_with_the_ca_verified() {
    let slapd = Slapd::for_test();
    let (ca, alice) = (slapd.ca_file(), slapd.user_dn("alice"));
    let password = slapd.password("alice");
    let ldaps = || LdapClient::new(&slapd.ldaps_url(), &ca);
    let expected = format!("dn:{alice}");
    assert_eq!(whoami(ldaps(), &alice, password).unwrap(), expected);
    let starttls = LdapClient::new(&slapd.ldap_url(), &ca).starttls();
    assert_eq!(whoami(starttls, &alice, password).unwrap(), expected);

    let wrong = whoami(ldaps(), &alice, "not-her-password").unwrap_err();
    assert!(
        format!("{wrong:#}").contains("Invalid credentials (49)"),
        "{wrong:#}"
    );
    let bob = whoami(ldaps(), &slapd.user_dn("bob"), password).unwrap_err();
    assert!(
        format!("{bob:#}").contains("Invalid credentials (49)"),
        "{bob:#}"
    );
    // A client trusting another CA does not get through the handshake.
    let other = tempfile::tempdir().unwrap();
    let other_ca = other.path().join("ca.pem");
    std::fs::write(&other_ca, crate::Fixture::new().unwrap().ca_pem()).unwrap();
    let untrusted = LdapClient::new(&slapd.ldaps_url(), &other_ca);
    let e = whoami(untrusted, &alice, password).unwrap_err();
    assert!(
        format!("{e:#}").contains("Can't contact LDAP server"),
        "{e:#}"
    );

    // Anonymous sees nothing; the service account sees users, but no password.
    let anonymous = ldaps().search(slapd.base_dn(), "(uid=alice)", &[]);
    let e = format!("{:#}", anonymous.unwrap_err());
    assert!(e.contains("No such object (32)"), "{e}");
    let svc = slapd.service_client();
    let entry = svc
        .search(slapd.base_dn(), "(uid=alice)", &["*", "memberOf"])
        .unwrap();
    assert_eq!(values(&entry, "mail"), ["alice@media.test"], "{entry}");
    assert!(values(&entry, "userPassword").is_empty(), "{entry}");
    let on_file = std::fs::read_to_string(slapd.bind_password_file()).unwrap();
    assert_eq!(on_file, slapd.fixture().service_password());
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(slapd.bind_password_file())
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
#[ignore = "needs slapd: `cargo xtask test` runs it"]
fn slapd_memberof_shows_each_level_of_nesting_and_the_cycle() {
    let slapd = Slapd::for_test();
    let svc = slapd.service_client();
    let member_of = |filter: &str| {
        let ldif = svc.search(slapd.base_dn(), filter, &["memberOf"]).unwrap();
        let mut groups = values(&ldif, "memberOf");
        groups.sort();
        groups
    };
    let g = |name: &str| slapd.group_dn(name);
    assert_eq!(member_of("(uid=alice)"), [g("editors")]);
    assert_eq!(member_of("(uid=bob)"), [g("viewers")]);
    assert_eq!(
        member_of("(&(objectClass=groupOfNames)(cn=editors))"),
        [g("media-staff")]
    );
    assert_eq!(member_of("(cn=media-staff)"), [g("all-staff")]);
    assert!(member_of("(cn=all-staff)").is_empty());
    assert_eq!(member_of("(uid=carol)"), [g("loop-a")]);
    assert_eq!(member_of("(cn=loop-a)"), [g("loop-b")]);
    assert_eq!(member_of("(cn=loop-b)"), [g("loop-a")]);
    // The same user name twice, for "matched by more than one entry".
    let dups = svc.search(slapd.base_dn(), "(uid=dup)", &["1.1"]).unwrap();
    assert_eq!(values(&dups, "dn").len(), 2, "{dups}");

    // The overlay follows changes made through the harness.
    slapd
        .modify(&format!(
            "dn: {}\nchangetype: modify\nadd: member\nmember: {}\n",
            g("viewers"),
            slapd.user_dn("alice")
        ))
        .unwrap();
    assert_eq!(member_of("(uid=alice)"), [g("editors"), g("viewers")]);
    slapd.delete(&g("editors")).unwrap();
    assert_eq!(member_of("(uid=alice)"), [g("viewers")]);
}

#[test]
#[ignore = "needs slapd: `cargo xtask test` runs it"]
fn slapd_restarts_in_place_after_a_kill_and_leaves_nothing_behind() {
    let mut slapd = Slapd::for_test();
    let (ldap_port, ldaps_port) = (slapd.ldap_port(), slapd.ldaps_port());
    let (ca, alice) = (slapd.ca_file(), slapd.user_dn("alice"));
    let password = slapd.password("alice").to_owned();
    let url = slapd.ldaps_url();
    let ldaps = || LdapClient::new(&url, &ca);
    slapd.delete(&slapd.user_dn("bob")).unwrap();
    let pid = slapd.pid().unwrap();

    slapd.kill();
    assert!(!alive(pid), "slapd {pid} survived SIGKILL");
    assert!(!port_open(ldaps_port) && !port_open(ldap_port));
    assert!(whoami(ldaps(), &alice, &password).is_err());

    let started = Instant::now();
    slapd.restart().unwrap();
    eprintln!("slapd restarted in {:.2?}", started.elapsed());
    assert_eq!(
        (slapd.ldap_port(), slapd.ldaps_port()),
        (ldap_port, ldaps_port)
    );
    assert_eq!(
        whoami(ldaps(), &alice, &password).unwrap(),
        format!("dn:{alice}")
    );
    let bob = slapd
        .service_client()
        .search(slapd.base_dn(), "(uid=bob)", &["1.1"]);
    assert_eq!(bob.unwrap(), "", "bob's deletion was lost");

    let dir = slapd.ca_file().parent().unwrap().to_owned();
    let pid = slapd.pid().unwrap();
    drop(slapd);
    assert!(!alive(pid), "slapd {pid} still runs after drop");
    assert!(!port_open(ldaps_port) && !port_open(ldap_port));
    assert!(!dir.exists(), "{} is still there", dir.display());
}

#[test]
#[ignore = "needs slapd: `cargo xtask test` runs it"]
fn two_slapd_servers_hold_the_same_entries() {
    let first = Slapd::for_test();
    let second = first.start_another().unwrap();
    assert_ne!(first.ldaps_port(), second.ldaps_port());
    let everything = |s: &Slapd| {
        let ldif = s
            .service_client()
            .search(s.base_dn(), "(objectClass=*)", &["*", "memberOf"])
            .unwrap();
        let mut entries: Vec<String> = ldif.split("\n\n").map(str::to_owned).collect();
        entries.sort();
        entries
    };
    let entries = everything(&first);
    assert!(entries.len() > 15, "{entries:?}");
    assert_eq!(entries, everything(&second));
    // One CA file and one password serve both, as for a replica.
    let alice = first.user_dn("alice");
    for s in [&first, &second] {
        let client = LdapClient::new(&s.ldaps_url(), &first.ca_file());
        assert_eq!(
            whoami(client, &alice, first.password("alice")).unwrap(),
            format!("dn:{alice}")
        );
    }
}

#[test]
#[ignore = "needs Samba: `cargo xtask test` runs it"]
fn samba_dc_binds_over_tls_finds_nested_groups_and_disables_accounts() {
    let started = Instant::now();
    let dc = SambaDc::for_test();
    eprintln!(
        "samba: provisioned, seeded and serving in {:.1?}",
        started.elapsed()
    );
    let (ca, alice) = (dc.ca_file(), dc.user_dn("alice"));
    let password = dc.password("alice");
    let ldaps = || LdapClient::new(&dc.ldaps_url(), &ca);
    ldaps().bind(&alice, password).check_bind().unwrap();
    ldaps()
        .bind(&dc.upn("alice"), password)
        .check_bind()
        .unwrap();
    let starttls = LdapClient::new(&dc.ldap_url(), &ca).starttls();
    starttls.bind(&alice, password).check_bind().unwrap();
    let plain = LdapClient::new(&dc.ldap_url(), &ca)
        .bind(&alice, password)
        .check_bind();
    let e = format!("{:#}", plain.unwrap_err());
    assert!(e.contains("Strong(er) authentication required (8)"), "{e}");
    let e = format!(
        "{:#}",
        ldaps()
            .bind(&alice, "Wrong-Pass-1")
            .check_bind()
            .unwrap_err()
    );
    assert!(e.contains("Invalid credentials (49)"), "{e}");

    step_samba_finds_nested_groups_in_chain(&dc);
    step_a_disabled_account_cannot_bind(&dc);
    let pid = dc.pid().unwrap();
    let dir = ca.parent().and_then(Path::parent).unwrap().to_owned();
    drop(dc);
    assert!(!alive(pid), "samba {pid} still runs after drop");
    assert!(!port_open(636) && !port_open(389));
    assert!(!dir.exists(), "{} is still there", dir.display());
}

/// Step: the service account finds alice's entry, and `LDAP_MATCHING_RULE_IN_CHAIN` her nested
/// groups, as membership changes.
fn step_samba_finds_nested_groups_in_chain(dc: &SambaDc) {
    let alice = dc.user_dn("alice");
    let svc = dc.service_client();
    let entry = svc
        .search(
            dc.base_dn(),
            "(sAMAccountName=alice)",
            &["userPrincipalName", "mail", "memberOf"],
        )
        .unwrap();
    assert_eq!(values(&entry, "dn"), [alice.as_str()], "{entry}");
    assert_eq!(values(&entry, "userPrincipalName"), ["alice@media.test"]);
    assert_eq!(values(&entry, "mail"), ["alice@media.test"]);
    assert_eq!(values(&entry, "memberOf"), [dc.group_dn("editors")]);
    let in_chain = |group: &str| {
        let filter = format!(
            "(&(objectClass=user)(memberOf:1.2.840.113556.1.4.1941:={}))",
            dc.group_dn(group)
        );
        values(&svc.search(dc.base_dn(), &filter, &["1.1"]).unwrap(), "dn")
    };
    assert_eq!(in_chain("all-staff"), [alice.as_str()]);
    assert_eq!(in_chain("loop-b"), [dc.user_dn("carol")]);
    dc.remove_group_member("editors", "alice").unwrap();
    assert!(in_chain("all-staff").is_empty());
    dc.add_group_member("media-staff", "alice").unwrap();
    assert_eq!(in_chain("all-staff"), [alice.as_str()]);
}

/// Step: a disabled account cannot bind (`data 533`), and binds again once enabled.
fn step_a_disabled_account_cannot_bind(dc: &SambaDc) {
    let (ca, alice) = (dc.ca_file(), dc.user_dn("alice"));
    let password = dc.password("alice");
    let ldaps = || LdapClient::new(&dc.ldaps_url(), &ca);
    let svc = dc.service_client();
    let uac = || {
        let ldif = svc
            .search(
                dc.base_dn(),
                "(sAMAccountName=alice)",
                &["userAccountControl"],
            )
            .unwrap();
        values(&ldif, "userAccountControl")[0]
            .parse::<u32>()
            .unwrap()
    };
    assert_eq!(uac() & 2, 0);
    dc.disable_user("alice").unwrap();
    assert_eq!(uac() & 2, 2);
    let e = format!(
        "{:#}",
        ldaps().bind(&alice, password).check_bind().unwrap_err()
    );
    assert!(
        e.contains("Invalid credentials (49)") && e.contains("data 533"),
        "{e}"
    );
    dc.enable_user("alice").unwrap();
    ldaps().bind(&alice, password).check_bind().unwrap();
}

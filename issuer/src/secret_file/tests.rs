use super::*;
use std::os::unix::fs::PermissionsExt;

const ME: u32 = 1000;

#[test]
fn a_secret_file_is_its_users_or_roots_and_private() {
    use Fault::*;
    for (owner, mode, fault) in [
        (ME, 0o600, None),
        (ME, 0o400, None),
        (0, 0o600, None),
        (ME, 0o700, None),
        (65534, 0o600, Some(NotOwned { owner: 65534 })),
        (65534, 0o666, Some(NotOwned { owner: 65534 })),
        (ME, 0o640, Some(Readable { mode: 0o640 })),
        (ME, 0o604, Some(Readable { mode: 0o604 })),
        (ME, 0o666, Some(Readable { mode: 0o666 })),
        (ME, 0o620, Some(Writable { mode: 0o620 })),
        (ME, 0o602, Some(Writable { mode: 0o602 })),
        (ME, 0o710, Some(Open { mode: 0o710 })),
        (ME, 0o100_600, None),
    ] {
        assert_eq!(
            file_fault(Rule::Secret, owner, mode, ME),
            fault,
            "{owner} {mode:o}"
        );
    }
}

#[test]
fn a_configuration_file_is_its_users_or_roots_and_written_by_them_alone() {
    use Fault::*;
    for (owner, mode, fault) in [
        (ME, 0o600, None),
        (0, 0o640, None),
        (ME, 0o644, None),
        (65534, 0o644, Some(NotOwned { owner: 65534 })),
        (ME, 0o664, Some(Writable { mode: 0o664 })),
        (0, 0o646, Some(Writable { mode: 0o646 })),
    ] {
        assert_eq!(
            file_fault(Rule::Config, owner, mode, ME),
            fault,
            "{owner} {mode:o}"
        );
    }
}

#[test]
fn a_folder_is_its_users_or_roots_and_written_by_them_alone() {
    use Fault::*;
    for (owners, owner, mode, fault) in [
        (Owners::MeOrRoot, ME, 0o700, None),
        (Owners::MeOrRoot, 0, 0o755, None),
        (Owners::MeOrRoot, 0, 0o1777, Some(Writable { mode: 0o1777 })),
        (Owners::MeOrRoot, ME, 0o770, Some(Writable { mode: 0o770 })),
        (
            Owners::MeOrRoot,
            65534,
            0o700,
            Some(NotOwned { owner: 65534 }),
        ),
        (Owners::Me, ME, 0o755, None),
        (Owners::Me, 0, 0o700, Some(NotOwned { owner: 0 })),
    ] {
        assert_eq!(
            folder_fault(owners, owner, mode, ME),
            fault,
            "{owners:?} {owner} {mode:o}"
        );
    }
    assert_eq!(folder_fault(Owners::Me, 0, 0o700, 0), None, "root's own");
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A folder of this test, and in it `secret` (0600) holding `s3cret`.
fn folder() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let secret = tmp.path().join("secret");
    std::fs::write(&secret, "s3cret\n").unwrap();
    set_mode(&secret, 0o600);
    (tmp, secret)
}

#[test]
fn a_private_file_is_read_and_an_open_one_refused_naming_the_fix() {
    let (_tmp, secret) = folder();
    assert_eq!(read("TLS key", &secret).unwrap().as_slice(), b"s3cret\n");
    set_mode(&secret, 0o666);
    let e = read("TLS key", &secret).unwrap_err().to_string();
    let s = secret.display();
    assert_eq!(
        e,
        format!("TLS key {s}: mode 0666 lets other users read it; run chmod 600 {s}")
    );
    set_mode(&secret, 0o644);
    let config = open("configuration file", &secret, Rule::Config).unwrap();
    let e = config.require_private().unwrap_err().to_string();
    assert!(e.contains("mode 0644 lets other users read it"), "{e}");
}

#[test]
fn a_link_is_judged_by_its_file_and_both_folders() {
    let (tmp, secret) = folder();
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&secret, &link).unwrap();
    assert_eq!(read("KEK", &link).unwrap().as_slice(), b"s3cret\n");
    set_mode(&secret, 0o640);
    let e = read("KEK", &link).unwrap_err().to_string();
    let (l, s) = (link.display(), secret.display());
    assert!(
        e.starts_with(&format!("KEK {l} (a link to {s}): mode 0640")),
        "{e}"
    );
    set_mode(&secret, 0o600);
    // The link in a folder anyone may write: anyone could point it elsewhere.
    let open_folder = tmp.path().join("open");
    std::fs::create_dir(&open_folder).unwrap();
    set_mode(&open_folder, 0o777);
    let far = open_folder.join("link");
    std::os::unix::fs::symlink(&secret, &far).unwrap();
    let e = read("KEK", &far).unwrap_err().to_string();
    let o = open_folder.display();
    assert!(
        e.ends_with(&format!(
            "its folder {o} (mode 0777) lets other users replace it; run chmod go-w {o} or move \
             the file"
        )),
        "{e}"
    );
}

#[test]
fn a_private_file_in_a_folder_others_may_write_is_refused() {
    let (tmp, _) = folder();
    let open_folder = tmp.path().join("open");
    std::fs::create_dir(&open_folder).unwrap();
    let secret = open_folder.join("secret");
    std::fs::write(&secret, "s3cret").unwrap();
    set_mode(&secret, 0o600);
    set_mode(&open_folder, 0o770);
    let e = read("secret_file", &secret).unwrap_err();
    assert!(
        matches!(e, FileError::FolderWritable { mode: 0o770, .. }),
        "{e}"
    );
    set_mode(&open_folder, 0o700);
    assert!(read("secret_file", &secret).is_ok());
}

#[test]
fn a_missing_file_or_a_folder_is_refused_with_the_cause() {
    let (tmp, _) = folder();
    let missing = tmp.path().join("none");
    let e = read("--kek-file", &missing).unwrap_err();
    assert!(matches!(e, FileError::Unreadable { .. }), "{e}");
    let told = e.describe();
    assert!(
        told.starts_with(&format!(
            "--kek-file {}: cannot be read: ",
            missing.display()
        )),
        "{told}"
    );
    let e = read("--kek-file", tmp.path()).unwrap_err();
    assert!(matches!(e, FileError::NotAFile { .. }), "{e}");
}

#[test]
fn a_file_over_its_limit_is_refused() {
    let (_tmp, secret) = folder();
    let checked = open("secret_file", &secret, Rule::Secret).unwrap();
    assert!(matches!(
        checked.read(3),
        Err(FileError::TooLarge { limit: 3, .. })
    ));
    let checked = open("secret_file", &secret, Rule::Secret).unwrap();
    assert_eq!(checked.read(7).unwrap().as_slice(), b"s3cret\n");
}

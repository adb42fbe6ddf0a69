use super::*;
use std::ffi::OsString;

const SYSTEM: &str = r#"
[daemon]
mode = "guarded"
[guarded]
humans = ["alice"]
[[vaults]]
id = "notes"
root = "/srv/notes"
command = ["node", "server.js"]
[[vaults.gates]]
tool = "write_file"
targets = { paths = ["path"] }
[vaults.acl]
deny = ["private/**"]
"#;

fn merge(user: &str) -> Result<Config, GuardedError> {
    merge_user(
        SYSTEM,
        Path::new(SYSTEM_CONFIG),
        Some((Path::new("/home/a/.config/tc/config.toml"), user)),
    )
}

fn refused_key(user: &str) -> String {
    match merge(user) {
        Err(GuardedError::NotTightening { key, .. }) => key,
        other => panic!("{user:?}: expected a refusal, got {other:?}"),
    }
}

const VAULT: &str = "[[vaults]]\nid = \"notes\"\n";

#[test]
fn no_user_file_is_the_system_policy() {
    let c = merge_user(SYSTEM, Path::new(SYSTEM_CONFIG), None).unwrap();
    assert_eq!(c.vaults[0].gates.len(), 1);
    assert_eq!(c.daemon.mode, Mode::Guarded);
}

#[test]
fn a_user_may_add_gates_denies_and_paged_tools() {
    let c = merge(&format!(
        "{VAULT}[[vaults.gates]]\ntool = \"delete\"\ntargets = \"none\"\n\
         [[vaults.gates]]\ntool = \"write_file\"\ntargets = {{ paths = [\"path\"] }}\n\
         [[vaults.paged]]\ntool = \"read_many\"\nitems = \"paths\"\n\
         [vaults.acl]\ndeny = [\"secret/**\", \"private/**\"]\n"
    ))
    .unwrap();
    let v = c.vault("notes").unwrap();
    let tools: Vec<&str> = v.gates.iter().map(|g| g.tool.as_str()).collect();
    assert_eq!(
        tools,
        ["write_file", "delete"],
        "the system gate kept, one added"
    );
    assert_eq!(v.acl.deny, ["private/**", "secret/**"]);
    assert_eq!(v.paged[0].tool, "read_many");
    assert_eq!(v.root, Path::new("/srv/notes"));
    // Keys repeated with the system's values are harmless.
    merge(&format!(
        "[daemon]\nmode = \"guarded\"\n{VAULT}root = \"/srv/notes\"\n"
    ))
    .unwrap();
}

#[test]
fn dropping_a_gate_from_the_user_file_keeps_the_system_gate() {
    let c = merge(VAULT).unwrap();
    assert_eq!(c.vault("notes").unwrap().gates[0].tool, "write_file");
}

#[test]
fn anything_else_is_refused_naming_the_key() {
    for (user, key) in [
        ("[daemon]\nsocket = \"/tmp/x.sock\"\n".to_string(), "daemon.socket"),
        ("[daemon]\nmode = \"personal\"\n".into(), "daemon.mode"),
        ("[daemon]\nelicit_ttl_seconds = 300\n".into(), "daemon.elicit_ttl_seconds"),
        ("[guarded]\nhumans = [\"mallory\"]\n".into(), "guarded.humans"),
        ("[governor]\nmax_response_bytes = 4096\n".into(), "governor.max_response_bytes"),
        ("[[vaults]]\nid = \"mine\"\nroot = \"/home/a\"\n".into(), "vaults[0].id"),
        (format!("{VAULT}root = \"/\"\n"), "vaults[0].root"),
        (format!("{VAULT}command = [\"sh\"]\n"), "vaults[0].command"),
        (format!("{VAULT}lean = true\n"), "vaults[0].lean"),
        (
            format!("{VAULT}[[vaults.gates]]\ntool = \"write_file\"\nwhen = {{ exists = \"path\" }}\ntargets = {{ paths = [\"path\"] }}\n"),
            "vaults[0].gates[0]",
        ),
        (
            format!("{VAULT}[[vaults.gates]]\ntool = \"write_file\"\ntargets = \"none\"\n"),
            "vaults[0].gates[0]",
        ),
        (
            format!("{VAULT}[[vaults.paths]]\ntool = \"t\"\nargs = [\"p\"]\nkind = \"none\"\n"),
            "vaults[0].paths",
        ),
        (format!("{VAULT}[vaults.acl]\nread_only = [\"a\"]\n"), "vaults[0].acl.read_only"),
    ] {
        assert_eq!(refused_key(&user), key, "{user}");
        let msg = merge(&user).unwrap_err().to_string();
        assert!(msg.contains(key) && msg.contains("config.toml"), "{msg}");
    }
}

#[test]
fn a_broken_user_file_is_an_error_not_ignored() {
    assert!(matches!(
        merge("[daemon\n"),
        Err(GuardedError::Config(ConfigError::Parse { .. }))
    ));
    assert_eq!(refused_key("[daemon]\nsockett = 1\n"), "daemon.sockett");
    // An added gate is checked like any gate, and the error names the user's file.
    let e = merge(&format!(
        "{VAULT}[[vaults.gates]]\ntool = \"rm\"\ntargets = {{ pathz = [\"p\"] }}\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("targets") && e.contains("/home/a/.config/tc/config.toml"),
        "{e}"
    );
    let e = merge(&format!("{VAULT}[[vaults.gates]]\ntool = \"rm\"\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("targets"), "{e}");
}

#[test]
fn a_policy_that_is_not_guarded_is_refused() {
    let e = merge_user("", Path::new(SYSTEM_CONFIG), None).unwrap_err();
    assert!(e.to_string().contains("daemon.mode"), "{e}");
}

#[test]
fn the_system_file_says_guarded_or_not_or_fails_closed() {
    use std::os::unix::fs::PermissionsExt as _;
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("config.toml");
    assert!(system_config_at(&p).unwrap().is_none(), "absent: personal");
    std::fs::write(&p, "[daemon]\nmode = \"personal\"\n").unwrap();
    assert!(system_config_at(&p).unwrap().is_none(), "says personal");
    std::fs::write(&p, SYSTEM).unwrap();
    let (c, text) = system_config_at(&p).unwrap().unwrap();
    assert_eq!((c.daemon.mode, text.as_str()), (Mode::Guarded, SYSTEM));
    std::fs::write(&p, "[daemon]\nmode = \"guardd\"\n").unwrap();
    assert!(system_config_at(&p).is_err(), "unparsable: an error");
    // A directory where the file should be cannot be read: an error, not personal.
    let d = t.path().join("dir.toml");
    std::fs::create_dir(&d).unwrap();
    assert!(matches!(
        system_config_at(&d),
        Err(GuardedError::Unreadable { .. })
    ));
    // Unreadable to this user (only meaningful when not root: root reads anything).
    if !nix::unistd::geteuid().is_root() {
        std::fs::write(&p, SYSTEM).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o000)).unwrap();
        assert!(matches!(
            system_config_at(&p),
            Err(GuardedError::Unreadable { .. })
        ));
    }
}

#[test]
fn overrides_are_named() {
    let none = |_: &str| None::<OsString>;
    refuse_overrides(None, None, &none).unwrap();
    let e = refuse_overrides(Some(Path::new("/x.toml")), None, &none).unwrap_err();
    assert!(e.to_string().contains("--config /x.toml"), "{e}");
    let e = refuse_overrides(None, Some(Path::new("/s")), &none).unwrap_err();
    assert!(e.to_string().contains("--socket /s"), "{e}");
    let env = |k: &str| (k == "TC_CONFIG").then(|| OsString::from("/z.toml"));
    let e = refuse_overrides(None, None, &env).unwrap_err();
    assert!(e.to_string().contains("TC_CONFIG=/z.toml"), "{e}");
}

#[test]
fn the_user_file_never_comes_from_tc_config() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().to_path_buf();
    std::fs::create_dir_all(home.join(".config/tc")).unwrap();
    std::fs::write(home.join(".config/tc/config.toml"), "# mine\n").unwrap();
    std::fs::write(home.join("elsewhere.toml"), "# planted\n").unwrap();
    let h = home.clone();
    let env = move |k: &str| match k {
        "HOME" => Some(h.clone().into_os_string()),
        "TC_CONFIG" => Some(h.join("elsewhere.toml").into_os_string()),
        _ => None,
    };
    let (p, text) = user_config_text(&env).unwrap().unwrap();
    assert_eq!(p, home.join(".config/tc/config.toml"));
    assert_eq!(text, "# mine\n");
}

#[test]
fn accounts_resolve_by_name_or_uid() {
    let mut c = Config::default();
    c.guarded.humans = vec!["root".into(), "4242".into()];
    assert_eq!(human_uids(&c).unwrap(), [0, 4242]);
    c.guarded.humans.push("no-such-user-tc".into());
    let e = human_uids(&c).unwrap_err().to_string();
    assert!(e.contains("guarded.humans[2]"), "{e}");
    c.guarded.daemon_user = "root".into();
    assert_eq!(daemon_uid(&c).unwrap(), 0);
}

/// Root-only: the files must be chowned to root and to someone else.
#[test]
fn root_ownership_is_checked_on_the_file_and_its_directory() {
    use std::os::unix::fs::{symlink, PermissionsExt as _};
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root to own files as root and as another uid");
        return;
    }
    let chmod =
        |p: &Path, m| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("etc-tc");
    std::fs::create_dir(&dir).unwrap();
    let f = dir.join("config.toml");
    std::fs::write(&f, SYSTEM).unwrap();
    chmod(&dir, 0o755);
    chmod(&f, 0o644);
    check_root_owned(&f).unwrap();
    let why = |p: &Path| match check_root_owned(p) {
        Err(GuardedError::NotRootOwned { path, why }) => format!("{}: {why}", path.display()),
        other => panic!("expected a refusal, got {other:?}"),
    };
    chmod(&f, 0o664);
    assert!(why(&f).contains("config.toml: mode 0664"), "{}", why(&f));
    chmod(&f, 0o646);
    assert!(why(&f).contains("mode 0646"));
    chmod(&f, 0o644);
    chmod(&dir, 0o775);
    assert!(why(&f).contains("etc-tc: mode 0775"), "{}", why(&f));
    chmod(&dir, 0o755);
    std::os::unix::fs::chown(&f, Some(65534), None).unwrap();
    assert!(why(&f).contains("owned by uid 65534"));
    std::os::unix::fs::chown(&f, Some(0), None).unwrap();
    std::os::unix::fs::chown(&dir, Some(65534), None).unwrap();
    assert!(why(&f).contains("etc-tc: is owned by uid 65534"));
    std::os::unix::fs::chown(&dir, Some(0), None).unwrap();
    let link = dir.join("link.toml");
    symlink(&f, &link).unwrap();
    assert!(why(&link).contains("symlink"));
    let dlink = t.path().join("dlink");
    symlink(&dir, &dlink).unwrap();
    assert!(why(&dlink.join("config.toml")).contains("dlink: is a symlink"));
}

/// Review 3: a gate the user adds cannot carry a `when` (it would un-floor a destructive
/// tool the system leaves ungated: disabled becomes "runs unconfirmed") nor a `probe`
/// (the shim would call a downstream tool of the agent's choosing, unconfirmed).
#[test]
fn an_added_gate_can_neither_switch_itself_off_nor_probe() {
    for (extra, key) in [
        (
            "when = { equals = { arg = \"dryRun\", value = \"never\" } }\ntargets = { paths = [\"path\"] }\n",
            "vaults[0].gates[0].when",
        ),
        (
            "targets = { probe = { tool = \"write_file\", arguments = { path = \"$path\" } } }\n",
            "vaults[0].gates[0].targets.probe",
        ),
    ] {
        let user = format!("{VAULT}[[vaults.gates]]\ntool = \"edit_file\"\n{extra}");
        assert_eq!(refused_key(&user), key, "{user}");
    }
    // Unconditional, locally fingerprinted gates are still welcome.
    merge(&format!(
        "{VAULT}[[vaults.gates]]\ntool = \"edit_file\"\ntargets = {{ paths = [\"path\"] }}\n"
    ))
    .unwrap();
}

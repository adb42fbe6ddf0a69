//! Validation of a vault's remote server (`url`, `[vaults.headers]`, `[vaults.bearer]`)
//! and of what a vault without a local root may gate on.

use super::findings::Findings;
use super::{Bearer, Targets, VaultConfig};

/// Headers tc-shim sets itself on every request to a remote server (and the ones HTTP
/// owns): a config value for them would be ambiguous or break the transport.
const RESERVED_HEADERS: &[&str] = &[
    "accept",
    "connection",
    "content-length",
    "content-type",
    "host",
    "last-event-id",
    "mcp-method",
    "mcp-name",
    "mcp-protocol-version",
    "mcp-session-id",
    "transfer-encoding",
];

/// A remote server's url as tc shows it in logs and errors: without its query string,
/// which some hosted servers take an API key in (`?key=…`).
pub fn shown_url(url: &str) -> std::borrow::Cow<'_, str> {
    match url.split_once('?') {
        Some((base, _)) => format!("{base}?…").into(),
        None => url.into(),
    }
}

/// `url` / `headers` / `bearer` / `ca_file` rules of the vault at `at`, and the root-less
/// vault's limits.
pub(super) fn check_remote(found: &mut Findings, at: &str, v: &VaultConfig) {
    let Some(url) = &v.url else {
        if !v.headers.is_empty() || v.bearer.is_some() || v.ca_file.is_some() {
            let key = match (&v.ca_file, &v.bearer) {
                (Some(_), _) => "ca_file",
                (None, Some(_)) => "bearer",
                (None, None) => "headers",
            };
            found.add(
                format!("{at}.{key}"),
                "[vaults.headers], [vaults.bearer] and ca_file are only for a vault with a url",
            );
        }
        return;
    };
    if let Some(ca) = &v.ca_file {
        if !ca.is_absolute() {
            found.add(format!("{at}.ca_file"), "must be an absolute path");
        }
        if !url.to_ascii_lowercase().starts_with("https://") {
            found.add(
                format!("{at}.ca_file"),
                "a CA file is for an https url (a plain http url has no certificate)",
            );
        }
    }
    if !v.command.is_empty() {
        found.add(
            format!("{at}.url"),
            "a vault names either a url (a remote server) or a command, not both",
        );
    }
    if let Err(why) = check_url(url) {
        found.add(format!("{at}.url"), why);
    }
    for (name, value) in &v.headers {
        if let Err(why) = check_header(name, value, v.bearer.is_some()) {
            found.add(format!("{at}.headers.{name}"), why);
        }
    }
    if let Some(b) = &v.bearer {
        check_bearer(found, at, b);
    }
    if !v.has_root() {
        check_rootless(found, at, v);
    }
}

/// `[vaults.bearer]`: exactly one of an absolute file or an environment variable.
fn check_bearer(found: &mut Findings, at: &str, b: &Bearer) {
    match (&b.file, &b.env) {
        (Some(f), None) if f.is_absolute() => {}
        (Some(_), None) => found.add(format!("{at}.bearer.file"), "must be an absolute path"),
        (None, Some(e)) if !e.is_empty() && !e.contains(['=', '\0']) => {}
        (None, Some(_)) => found.add(
            format!("{at}.bearer.env"),
            "must name an environment variable",
        ),
        _ => found.add(
            format!("{at}.bearer"),
            "give exactly one of file = \"/path/to/token\" or env = \"VARIABLE\"",
        ),
    }
}

/// A remote vault without a local root has no files of its own to judge: path
/// targets, file conditions, diff previews, path declarations and an ACL need one.
fn check_rootless(found: &mut Findings, at: &str, v: &VaultConfig) {
    let need = |found: &mut Findings, key: String, what: &str| {
        found.add(
            key,
            format!(
                "{what} needs a local root; this vault has a url and no root: give root = \
                 \"/abs/path\" (a local copy of what the server serves), or gate with \
                 targets = \"none\", {{ probe = … }} or {{ git = \"<argument>\" }} only"
            ),
        )
    };
    for (j, g) in v.gates.iter().enumerate() {
        found.in_gate(Some(&g.tool));
        let key = format!("{at}.gates[{j}]");
        match &g.targets {
            Some(Targets::None) | Some(Targets::Probe { .. }) | Some(Targets::Git(Some(_))) => {}
            Some(Targets::Git(None)) => need(
                found,
                format!("{key}.targets"),
                "git = \"\" (the vault root)",
            ),
            Some(_) => need(found, format!("{key}.targets"), "a path target"),
            None => {}
        }
        if g.when
            .as_ref()
            .is_some_and(|w| w.cross_folder.is_some() || w.exists.is_some())
        {
            need(found, format!("{key}.when"), "a file condition");
        }
        if g.preview.is_some() {
            need(found, format!("{key}.preview"), "a diff preview");
        }
    }
    found.in_gate(None);
    if !v.paths.is_empty() {
        need(found, format!("{at}.paths"), "[[vaults.paths]]");
    }
    if !(v.acl.deny.is_empty() && v.acl.read_only.is_empty()) {
        need(found, format!("{at}.acl"), "an ACL");
    }
}

/// `http://` or `https://`, a host, no credentials (a secret in the config file would be
/// logged with the url: use `[vaults.bearer]`), no fragment, nothing unprintable.
fn check_url(url: &str) -> Result<(), String> {
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("must not contain whitespace or control characters".into());
    }
    let lower = url.to_ascii_lowercase();
    let rest = if lower.starts_with("https://") {
        &url[8..]
    } else if lower.starts_with("http://") {
        &url[7..]
    } else {
        return Err(format!(
            "{:?} is not an http:// or https:// URL",
            shown_url(url)
        ));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err(
            "must not carry credentials (user:password@): put a token in [vaults.bearer]".into(),
        );
    }
    let host = authority
        .rsplit_once(':')
        .filter(|(h, p)| !p.contains(']') && !h.is_empty())
        .map_or(authority, |(h, _)| h);
    if host.is_empty() {
        return Err(format!("{:?} names no host", shown_url(url)));
    }
    if url.contains('#') {
        return Err("must not have a fragment (#…)".into());
    }
    Ok(())
}

/// A header name is an RFC 9110 token and not one tc-shim owns; a value is visible
/// ASCII (and inner spaces or tabs).
fn check_header(name: &str, value: &str, has_bearer: bool) -> Result<(), String> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(token) {
        return Err("is not a valid header name".into());
    }
    let lower = name.to_ascii_lowercase();
    if RESERVED_HEADERS.contains(&lower.as_str()) {
        return Err("is set by tc-shim itself (the MCP transport) and cannot be configured".into());
    }
    if lower == "authorization" {
        return Err(if has_bearer {
            "conflicts with [vaults.bearer]".into()
        } else {
            "a credential does not belong in the config file: use [vaults.bearer] \
             (file = \"…\" or env = \"…\")"
                .into()
        });
    }
    if !value
        .chars()
        .all(|c| c == ' ' || c == '\t' || c.is_ascii_graphic())
    {
        return Err("value must be printable ASCII (no line breaks or control characters)".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::path::Path;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, Path::new("/etc/tc.toml")).map_err(|e| e.to_string())
    }

    const REMOTE: &str = "[[vaults]]\nid = \"r\"\nurl = \"https://mcp.example.com/mcp\"\n";

    #[test]
    fn a_url_is_shown_without_its_query() {
        use super::shown_url;
        assert_eq!(shown_url("https://h/mcp?key=s3cret&x=1"), "https://h/mcp?…");
        assert_eq!(shown_url("https://h/mcp"), "https://h/mcp");
        let e = parse("[[vaults]]\nid = \"r\"\nurl = \"ftp://h/mcp?key=s3cret\"\n").unwrap_err();
        assert!(e.contains("ftp://h/mcp?…") && !e.contains("s3cret"), "{e}");
    }

    #[test]
    fn a_url_vault_needs_no_root_and_gates_with_git_probe_or_none() {
        let c = parse(&format!(
            "{REMOTE}[vaults.headers]\nX-Tenant = \"a b\"\n[vaults.bearer]\nenv = \"TOKEN\"\n\
             [[vaults.gates]]\ntool = \"a\"\ntargets = \"none\"\n\
             [[vaults.gates]]\ntool = \"b\"\ntargets = {{ probe = {{ tool = \"get\" }} }}\n\
             [[vaults.gates]]\ntool = \"c\"\ntargets = {{ git = \"repo_path\" }}\n"
        ))
        .unwrap();
        let v = c.vault("r").unwrap();
        assert!(!v.has_root());
        assert_eq!(v.headers["X-Tenant"], "a b");
    }

    #[test]
    fn a_rootless_vault_refuses_what_needs_files() {
        for (extra, key) in [
            ("[[vaults.gates]]\ntool = \"w\"\ntargets = { paths = [\"p\"] }\n", "gates[0].targets"),
            ("[[vaults.gates]]\ntool = \"w\"\ntargets = { tree = { root = \"p\" } }\n", "gates[0].targets"),
            ("[[vaults.gates]]\ntool = \"w\"\ntargets = { git = \"\" }\n", "gates[0].targets"),
            ("[[vaults.gates]]\ntool = \"w\"\nwhen = { exists = \"p\" }\ntargets = \"none\"\n", "gates[0].when"),
            ("[[vaults.gates]]\ntool = \"w\"\ntargets = \"none\"\npreview = { diff = { path = \"p\", content = \"c\" } }\n", "gates[0].preview"),
            ("[[vaults.paths]]\ntool = \"t\"\nargs = [\"a\"]\nkind = \"path\"\n", "vaults[0].paths"),
            ("[vaults.acl]\ndeny = [\"x/**\"]\n", "vaults[0].acl"),
        ] {
            let e = parse(&format!("{REMOTE}{extra}")).unwrap_err();
            assert!(e.contains(key) && e.contains("needs a local root"), "{extra}: {e}");
        }
        // With a root, the same path gate is fine.
        parse(&format!(
            "{REMOTE}root = \"/srv/copy\"\n[[vaults.gates]]\ntool = \"w\"\ntargets = {{ paths = [\"p\"] }}\n"
        ))
        .unwrap();
    }

    #[test]
    fn url_rules_name_the_key() {
        for (text, key, why) in [
            (
                "[[vaults]]\nid = \"r\"\nurl = \"https://h/mcp\"\ncommand = [\"x\"]\n".to_string(),
                "vaults[0].url",
                "not both",
            ),
            ("[[vaults]]\nid = \"r\"\nurl = \"ftp://h/mcp\"\n".into(), "vaults[0].url", "http"),
            ("[[vaults]]\nid = \"r\"\nurl = \"https://u:p@h/mcp\"\n".into(), "vaults[0].url", "credentials"),
            ("[[vaults]]\nid = \"r\"\nurl = \"https:///mcp\"\n".into(), "vaults[0].url", "no host"),
            ("[[vaults]]\nid = \"r\"\nurl = \"https://h/mcp#x\"\n".into(), "vaults[0].url", "fragment"),
            ("[[vaults]]\nid = \"r\"\nroot = \"/a\"\ncommand = [\"x\"]\n[vaults.bearer]\nenv = \"T\"\n".into(), "vaults[0].bearer", "only for a vault with a url"),
            ("[[vaults]]\nid = \"r\"\nroot = \"relative\"\nurl = \"https://h/mcp\"\n".into(), "vaults[0].root", "absolute"),
            ("[[vaults]]\nid = \"r\"\nurl = \"https://h/mcp\"\nca_file = \"ca.pem\"\n".into(), "vaults[0].ca_file", "absolute"),
            ("[[vaults]]\nid = \"r\"\nurl = \"http://h/mcp\"\nca_file = \"/ca.pem\"\n".into(), "vaults[0].ca_file", "https"),
            ("[[vaults]]\nid = \"r\"\nroot = \"/a\"\ncommand = [\"x\"]\nca_file = \"/ca.pem\"\n".into(), "vaults[0].ca_file", "only for a vault with a url"),
            ("[[vaults]]\nid = \"r\"\nroot = \"/a\"\n".replace("root = \"/a\"\n", ""), "vaults[0].root", "absolute"),
        ] {
            let e = parse(&text).unwrap_err();
            assert!(e.contains(key) && e.contains(why), "{text}: {e}");
        }
    }

    #[test]
    fn bearer_is_exactly_one_of_file_or_env_and_headers_are_checked() {
        for (bearer, why) in [
            ("file = \"/t\"\nenv = \"T\"\n", "exactly one"),
            ("", "exactly one"),
            ("file = \"t\"\n", "absolute"),
            ("env = \"\"\n", "environment variable"),
        ] {
            let e = parse(&format!("{REMOTE}[vaults.bearer]\n{bearer}")).unwrap_err();
            assert!(
                e.contains("vaults[0].bearer") && e.contains(why),
                "{bearer}: {e}"
            );
        }
        for (header, why) in [
            ("Authorization = \"Bearer x\"", "does not belong"),
            ("Mcp-Session-Id = \"x\"", "set by tc-shim"),
            ("\"Bad Name\" = \"x\"", "header name"),
            ("X-A = \"a\\nb\"", "printable"),
        ] {
            let e = parse(&format!("{REMOTE}[vaults.headers]\n{header}\n")).unwrap_err();
            assert!(
                e.contains("vaults[0].headers") && e.contains(why),
                "{header}: {e}"
            );
        }
    }
}

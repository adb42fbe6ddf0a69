//! Reading git revisions and pathspecs for the ACL: the paths a value names, or why
//! it cannot be judged. Pure string work; the policy resolves what comes out.

/// Why a revision or pathspec cannot be judged by path (the call is refused under an ACL).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Unjudgeable {
    #[error("{0:?} contains `\\`, which git and GitPython read differently")]
    Backslash(String),
    #[error("{0:?} contains a control character")]
    Control(String),
    #[error("path part {0:?} contains `..`")]
    DotDot(String),
    #[error("{0:?}: unterminated pathspec magic")]
    Unterminated(String),
    #[error("{value:?}: pathspec magic `{magic}` cannot be judged")]
    Magic { value: String, magic: String },
    #[error("{0:?}: exclude magic cannot be judged")]
    Exclude(String),
    #[error("{0:?}: wildcards cannot be judged by path")]
    Wildcard(String),
}

/// Characters that make a value unjudgeable: escapes (git and GitPython treat `\`
/// differently inside `{…}`) and control characters.
fn plain(v: &str) -> Result<(), Unjudgeable> {
    if v.contains('\\') {
        return Err(Unjudgeable::Backslash(v.into()));
    }
    if v.chars().any(char::is_control) {
        return Err(Unjudgeable::Control(v.into()));
    }
    Ok(())
}

/// `p` without a trailing range suffix (`^@`, `^!`, `^-`, `^-<n>`).
fn strip_range_suffix(p: &str) -> &str {
    for s in ["^@", "^!"] {
        if let Some(x) = p.strip_suffix(s) {
            return x;
        }
    }
    let digits = p.trim_end_matches(|c: char| c.is_ascii_digit());
    digits.strip_suffix("^-").unwrap_or(p)
}

/// A path part made relative to the repository top: leading `/` (`:/text`, `HEAD:/x`)
/// and `./` dropped; a `..` component is refused (git resolves it against the caller's
/// directory, GitPython not at all).
fn tidy(p: &str) -> Result<String, Unjudgeable> {
    let mut s = p.trim_start_matches('/');
    while let Some(rest) = s.strip_prefix("./") {
        s = rest.trim_start_matches('/');
    }
    if s == "." {
        s = "";
    }
    if s.split('/').any(|c| c == "..") {
        return Err(Unjudgeable::DotDot(p.into()));
    }
    Ok(s.to_string())
}

/// Every path a revision may name, relative to the repository top ("" is the top).
///
/// Git splits `<rev>:<path>` at the first `:` outside `{…}`, GitPython at the first of
/// `^~:` outside `@{…}`/`^{…}`, and `:<path>`, `:<n>:<path>`, `:/<text>` start with one;
/// so the text after *every* `:` is taken as a path, and each is also read cut at a
/// range (`..`, `...`) and without a range suffix (`^@`, `^!`, `^-<n>`). A value with
/// no `:` names no path (a commit: its diff is the server's answer, see THREAT-MODEL).
pub fn revision_paths(v: &str) -> Result<Vec<String>, Unjudgeable> {
    plain(v)?;
    let mut out = Vec::new();
    for (i, _) in v.match_indices(':') {
        let tail = &v[i + 1..];
        let mut variants = vec![tail];
        if let Some(j) = tail.find("..") {
            variants.push(&tail[..j]);
        }
        for p in variants {
            for q in [p, strip_range_suffix(p)] {
                let t = tidy(q)?;
                if !out.contains(&t) {
                    out.push(t);
                }
            }
        }
    }
    Ok(out)
}

/// The literal path a git pathspec names (it covers that path and everything under
/// it), relative to the repository top or absolute. Magic other than `top` and
/// `literal` (`exclude`, `icase`, `glob`, `attr`, `:!`, `:^`) and wildcards (`*`, `?`,
/// `[`) are refused: which files they reach is not a path the ACL can judge.
pub fn pathspec_path(v: &str) -> Result<String, Unjudgeable> {
    plain(v)?;
    let mut literal = false;
    let rest = if let Some(long) = v.strip_prefix(":(") {
        let Some(end) = long.find(')') else {
            return Err(Unjudgeable::Unterminated(v.into()));
        };
        for w in long[..end].split(',').map(str::trim) {
            match w {
                "top" | "" => {}
                "literal" => literal = true,
                other => {
                    return Err(Unjudgeable::Magic {
                        value: v.into(),
                        magic: other.into(),
                    })
                }
            }
        }
        &long[end + 1..]
    } else if let Some(short) = v.strip_prefix(':') {
        let magic_end = short.find(|c| !"/!^".contains(c)).unwrap_or(short.len());
        if short[..magic_end].contains(['!', '^']) {
            return Err(Unjudgeable::Exclude(v.into()));
        }
        let rest = &short[magic_end..];
        rest.strip_prefix(':').unwrap_or(rest)
    } else {
        v
    };
    if !literal && rest.contains(['*', '?', '[']) {
        return Err(Unjudgeable::Wildcard(v.into()));
    }
    Ok(rest.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(v: &str) -> Vec<String> {
        revision_paths(v).unwrap_or_else(|e| panic!("{v}: {e}"))
    }

    fn names(v: &str, p: &str) -> bool {
        paths(v).iter().any(|x| x == p)
    }

    #[test]
    fn revisions_name_their_path_parts() {
        for v in [
            "HEAD",
            "main",
            "HEAD~1",
            "HEAD^{tree}",
            "a1b2c3",
            "HEAD~1..HEAD",
            "v1...v2",
        ] {
            assert!(paths(v).is_empty(), "{v}: {:?}", paths(v));
        }
        for (v, p) in [
            ("HEAD:private/key.txt", "private/key.txt"),
            ("HEAD:./private/key.txt", "private/key.txt"),
            ("HEAD:.//private/key.txt", "private/key.txt"),
            ("HEAD~1:private/x", "private/x"),
            ("main^2~3:private", "private"),
            (":private/x", "private/x"),
            (":0:private/x", "private/x"),
            (":3:private/x", "private/x"),
            (":/private", "private"),
            ("HEAD:/private/x", "private/x"),
            ("HEAD@{10:00}:private/x", "private/x"),
            ("HEAD@{yesterday}:private/x", "private/x"),
            ("HEAD^{/fix: it}:private/x", "private/x"),
            ("HEAD:a..HEAD:private/x", "private/x"),
            ("HEAD:private/x..HEAD", "private/x"),
            ("HEAD:private/x^!", "private/x"),
            ("HEAD:private/x^-2", "private/x"),
            ("HEAD:", ""),
            ("HEAD:.", ""),
        ] {
            assert!(names(v, p), "{v} should name {p:?}: {:?}", paths(v));
        }
    }

    #[test]
    fn unjudgeable_revisions_are_refused() {
        for v in [
            "HEAD:../x",
            "HEAD:a/../private/x",
            "HEAD^{/a\\}:private/x}",
            "HEAD:private/x\n",
            ":../x",
        ] {
            assert!(revision_paths(v).is_err(), "{v:?}: {:?}", revision_paths(v));
        }
    }

    #[test]
    fn pathspecs_name_a_path_or_are_refused() {
        for (v, p) in [
            ("private/key.txt", "private/key.txt"),
            (".", "."),
            (":(top)private", "private"),
            (":/private", "private"),
            (":/:private", "private"),
            ("::private", "private"),
            (":(literal)a*b", "a*b"),
            (":(top,literal)p?", "p?"),
            ("/abs/x", "/abs/x"),
        ] {
            assert_eq!(pathspec_path(v).as_deref(), Ok(p), "{v}");
        }
        for v in [
            "*.txt",
            "p*",
            "priv?te",
            "[p]rivate",
            ":(glob)private/*",
            ":(icase)PRIVATE",
            ":(exclude)public",
            ":(attr:secret)",
            ":!public",
            ":^public",
            ":/!public",
            ":(top",
            "a\\*",
            "x\r",
        ] {
            assert!(pathspec_path(v).is_err(), "{v:?}: {:?}", pathspec_path(v));
        }
    }
}

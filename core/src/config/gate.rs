//! `[[vaults.gates]]`: a tool call that needs a human, when it does, what the
//! confirmation is bound to ([`Targets`]) and what the human is shown besides.

use serde::Deserialize;

/// `[[vaults.gates]]`: a tool that needs confirmation.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gate {
    pub tool: String,
    #[serde(default)]
    pub when: Option<When>,
    /// Required; `Option` only so a missing value gets a message saying what to write.
    #[serde(default)]
    pub targets: Option<Targets>,
    /// What the human is shown of the call's effect besides its arguments (none: nothing).
    #[serde(default)]
    pub preview: Option<Preview>,
    /// Whether an approval of this tool may come with a grant for similar calls
    /// (`tcctl approve --grant`); `false` for calls no grant should ever cover.
    #[serde(default = "yes")]
    pub grants: bool,
    /// The longest grant for this tool, in seconds (default 8 hours).
    #[serde(default)]
    pub max_grant_seconds: Option<u64>,
    /// The most uses a grant for this tool may allow (none: no cap but the expiry).
    #[serde(default)]
    pub max_grant_uses: Option<u32>,
}

fn yes() -> bool {
    true
}

impl Gate {
    /// The arguments this gate itself reads as paths: its `when` paths, its targets'
    /// paths, tree or matching root or repository, its preview's file. The shim judges
    /// them as paths whatever the tool's schema says; tcd offers and accepts only globs
    /// for them in a grant.
    pub fn path_args(&self) -> Vec<String> {
        let mut names = Vec::new();
        if let Some(w) = &self.when {
            if let Some(cf) = &w.cross_folder {
                names.extend(cf.iter().cloned());
            }
            if let Some(e) = &w.exists {
                names.push(e.clone());
            }
        }
        match &self.targets {
            Some(Targets::Paths(p)) => names.extend(p.iter().cloned()),
            Some(Targets::Tree { root, .. }) | Some(Targets::Matching { root, .. }) => {
                names.push(root.clone())
            }
            Some(Targets::Git(Some(a))) => names.push(a.clone()),
            _ => {}
        }
        if let Some(Preview::Diff(d)) = &self.preview {
            names.push(d.path.clone());
        }
        names
    }

    /// The longest grant this gate allows, in seconds.
    pub fn grant_seconds_cap(&self) -> u64 {
        self.max_grant_seconds
            .unwrap_or(crate::grant::DEFAULT_MAX_SECONDS)
    }
}

/// `preview = { diff = { path = "…", content = "…" } }`: the names of the call's
/// arguments holding the file written and its new content; the shim shows a unified diff
/// of the file as it is against what the write would make it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum Preview {
    Diff(DiffPreview),
}

/// `preview.diff`
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiffPreview {
    pub path: String,
    pub content: String,
}

/// Conditions under which a gate applies (all given ones must hold); absent = always.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct When {
    /// The parent folders of these two path arguments differ.
    pub cross_folder: Option<[String; 2]>,
    /// The path argument names something that already exists.
    pub exists: Option<String>,
    /// The argument equals the value.
    pub equals: Option<Equals>,
}

/// `when.equals = { arg = "…", value = … }`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Equals {
    pub arg: String,
    pub value: serde_json::Value,
}

/// What a confirmation is bound to.
#[derive(Debug, Clone, PartialEq)]
pub enum Targets {
    /// `targets = "none"`: arguments only (a stated residual).
    None,
    /// Each path argument's existence, type and content.
    Paths(Vec<String>),
    /// Files under `root` matching `glob`, with content hashes.
    Tree { root: String, glob: String },
    /// Files under `root` whose content contains the argument's value.
    Matching { root: String, contains: String },
    /// HEAD and the staged index of the repository at this argument (None: vault root).
    Git(Option<String>),
    /// The result of a read-only downstream tool with templated arguments.
    Probe {
        tool: String,
        arguments: serde_json::Value,
    },
}

#[derive(Deserialize)]
#[serde(untagged)]
enum TargetsRepr {
    Word(String),
    Table(TargetsTable),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
enum TargetsTable {
    Paths(Vec<String>),
    Tree {
        root: String,
        #[serde(default = "default_glob")]
        glob: String,
    },
    Matching {
        root: String,
        contains: String,
    },
    Git(String),
    Probe {
        tool: String,
        #[serde(default = "empty_object")]
        arguments: serde_json::Value,
    },
}

fn default_glob() -> String {
    "**".into()
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

impl<'de> Deserialize<'de> for Targets {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        Ok(match TargetsRepr::deserialize(d).map_err(|_| {
            D::Error::custom(
                "targets must be \"none\" or one of { paths = [..] }, { tree = { root, glob } }, \
                 { matching = { root, contains } }, { git = \"arg\" | \"\" }, { probe = { tool, arguments } }",
            )
        })? {
            TargetsRepr::Word(w) if w == "none" => Targets::None,
            TargetsRepr::Word(w) => {
                return Err(D::Error::custom(format!("unknown targets keyword {w:?} (only \"none\")")))
            }
            TargetsRepr::Table(TargetsTable::Paths(p)) => Targets::Paths(p),
            TargetsRepr::Table(TargetsTable::Tree { root, glob }) => Targets::Tree { root, glob },
            TargetsRepr::Table(TargetsTable::Matching { root, contains }) => {
                Targets::Matching { root, contains }
            }
            TargetsRepr::Table(TargetsTable::Git(a)) => {
                Targets::Git(if a.is_empty() { None } else { Some(a) })
            }
            TargetsRepr::Table(TargetsTable::Probe { tool, arguments }) => {
                Targets::Probe { tool, arguments }
            }
        })
    }
}

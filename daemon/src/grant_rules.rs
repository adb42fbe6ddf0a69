//! What each gate allows of grants (`grants`, `max_grant_seconds`, `max_grant_uses`, its
//! path arguments), from tcd's own config: the ledger holds them, `grants/` applies them.

use std::collections::HashMap;

use tc_core::config::VaultConfig;

/// What a gate allows of grants (`grants`, `max_grant_seconds`, `max_grant_uses`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GrantRule {
    pub allowed: bool,
    pub max_seconds: u64,
    pub max_uses: Option<u32>,
    /// The gate's own path arguments ([`tc_core::config::Gate::path_args`]): widened only
    /// by a glob, never to "any value", whatever a raise says of them.
    pub path_args: Vec<String>,
}

/// Each gate's rule, by (vault, tool), from the daemon's own config.
pub type GrantRules = HashMap<(String, String), GrantRule>;

/// The rules of every gate of `vaults`.
pub fn rules_of(vaults: &[VaultConfig]) -> GrantRules {
    let mut rules = GrantRules::new();
    for v in vaults {
        for g in &v.gates {
            let rule = GrantRule {
                allowed: g.grants,
                max_seconds: g.grant_seconds_cap(),
                max_uses: g.max_grant_uses,
                path_args: g.path_args(),
            };
            rules.insert((v.id.clone(), g.tool.clone()), rule);
        }
    }
    rules
}

//! `tcctl token mint`: a bearer token for an HTTP caller of a vault whose
//! `[vaults.http.auth]` is `mode = "jwt"` with tokens minted by tcd (prints only the token).

use clap::{Args, Subcommand};
use tc_core::config::{AuthMode, Config};
use tc_proto::v1;

use crate::client::{self, status_error, Target};
use crate::{exit, CliError};

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Mint a bearer token naming a caller (root only in guarded mode).
    Mint(MintArgs),
}

#[derive(Debug, Args)]
pub struct MintArgs {
    /// The caller the token names ([A-Za-z0-9._@:-], at most 128).
    #[arg(long)]
    pub sub: String,
    /// How long it is valid: seconds, or a number with s, m, h or d (at most 30d).
    #[arg(long, default_value = "1h", value_parser = parse_ttl)]
    pub ttl: u64,
    /// The vault it is for (required when the config lists more than one).
    #[arg(long)]
    pub vault: Option<String>,
    /// A scope the token carries (repeatable).
    #[arg(long = "scope", value_name = "SCOPE")]
    pub scopes: Vec<String>,
}

/// `30`, `90s`, `15m`, `1h`, `7d` → seconds.
pub fn parse_ttl(s: &str) -> Result<u64, String> {
    let (num, unit) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&s[..i], c),
        _ => (s, 's'),
    };
    let mult = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return Err(format!("{s:?}: the unit must be s, m, h or d")),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 90s, 15m, 1h or 7d"))?;
    match n.checked_mul(mult) {
        Some(0) | None => Err(format!("{s:?}: must be at least 1s")),
        Some(v) => Ok(v),
    }
}

/// The audience of `vault`'s tcd-minted tokens, or why it has none.
fn audience(config: &Config, vault: &str) -> Result<String, CliError> {
    let fail = |m: String| CliError::new(exit::CONFIG, m);
    let v = config
        .vault(vault)
        .ok_or_else(|| fail(format!("the config has no vault {vault:?}")))?;
    let a = v.http.as_ref().map(|h| &h.auth);
    match a {
        Some(a) if a.mode == AuthMode::Jwt && a.jwks_url.is_none() && a.public_keys.is_empty() => {
            Ok(a.audience.clone().unwrap_or_default())
        }
        _ => Err(fail(format!(
            "vault {vault:?} does not take tokens minted by tcd: that needs [vaults.http.auth] \
             mode = \"jwt\" with an audience and neither jwks_url nor public_keys"
        ))),
    }
}

/// Mints and prints the token.
pub async fn mint(config: &Config, target: Target, a: MintArgs) -> Result<(), CliError> {
    let vault = crate::client::vault_for(config, a.vault)?;
    let audience = audience(config, &vault)?;
    let mut d = client::connect(&target).await?;
    let reply = d
        .client
        .mint_token(v1::MintTokenRequest {
            sub: a.sub,
            ttl_seconds: a.ttl,
            audience,
            scopes: a.scopes,
        })
        .await
        .map_err(|s| status_error(&target.path, &s))?
        .into_inner();
    crate::print_token(&reply.token, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_take_a_unit() {
        assert_eq!(parse_ttl("30"), Ok(30));
        assert_eq!(parse_ttl("90s"), Ok(90));
        assert_eq!(parse_ttl("15m"), Ok(900));
        assert_eq!(parse_ttl("1h"), Ok(3600));
        assert_eq!(parse_ttl("7d"), Ok(604_800));
        for bad in [
            "",
            "h",
            "0",
            "0h",
            "1w",
            "-1h",
            "1.5h",
            "99999999999999999999d",
        ] {
            assert!(parse_ttl(bad).is_err(), "{bad}");
        }
    }
}

//! `tc-shim`: placeholder entry point until the proxy lands (issue 3).
fn main() -> anyhow::Result<()> {
    anyhow::bail!("tc-shim is not built yet")
}

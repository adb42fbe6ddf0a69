//! Reading the vault's files for fingerprints without following what an agent planted:
//! regular files only, names kept byte for byte, git's index read straight from `.git`.

pub mod gitindex;
pub mod names;
pub mod regular;

//! Generates the tc.v1 client and server with protox, so no system `protoc` is needed.
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/tc/v1/tc.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let fds_path = out.join("tc_descriptor.bin");
    std::fs::write(&fds_path, prost::Message::encode_to_vec(&fds))?;
    tonic_prost_build::configure()
        .file_descriptor_set_path(&fds_path)
        .skip_protoc_run()
        .compile_protos(&[proto], &["proto"])?;
    Ok(())
}

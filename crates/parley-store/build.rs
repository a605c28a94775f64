//! Rebuilds the store when a migration changes: `sqlx::migrate!` embeds them at compile time
//! but does not track the folder on stable Rust.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}

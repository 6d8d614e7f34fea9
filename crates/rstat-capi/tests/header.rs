//! `include/rstat.h` is generated from the sources by cbindgen and checked
//! in; this test regenerates it and fails if the checked-in copy is stale.
//! `RSTAT_CAPI_BLESS=1 cargo test -p rstat-capi --test header` rewrites it.

use std::path::Path;

#[test]
fn header_is_up_to_date() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen could not parse the crate")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("cbindgen writes UTF-8");
    let path = dir.join("include/rstat.h");
    if std::env::var_os("RSTAT_CAPI_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write include/rstat.h");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    if checked_in != generated {
        let first = checked_in
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(checked_in.lines().count().min(generated.lines().count()));
        panic!(
            "include/rstat.h is stale (first difference at line {}):\n  checked in: {:?}\n  generated:  {:?}\n\
             regenerate it with: RSTAT_CAPI_BLESS=1 cargo test -p rstat-capi --test header",
            first + 1,
            checked_in.lines().nth(first).unwrap_or("<end of file>"),
            generated.lines().nth(first).unwrap_or("<end of file>"),
        );
    }
}

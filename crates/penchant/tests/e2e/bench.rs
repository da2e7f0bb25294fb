//! `penchant bench ...` runs the `penchant-bench` executable next to `penchant`, with the
//! arguments as given, and exits with its status; without it, it says how to build it.
//!
//! The suites themselves are tested in `crates/penchant-bench/tests/`. Here `penchant` runs from
//! a folder of its own, beside a stand-in `penchant-bench` (or none). One test: the stand-in is
//! written and then executed, which no other thread of this process may fork across.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

/// `penchant` hard-linked (else copied) into `dir`: its `current_exe()` is then in `dir`.
fn penchant_in(dir: &Path) -> std::path::PathBuf {
    let src = Path::new(env!("CARGO_BIN_EXE_penchant"));
    let dst = dir.join("penchant");
    if std::fs::hard_link(src, &dst).is_err() {
        std::fs::copy(src, &dst).unwrap();
    }
    dst
}

fn run(exe: &Path, args: &[&str]) -> Output {
    Command::new(exe).args(args).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn bench_runs_penchant_bench_beside_it_with_the_arguments_as_given() {
    let dir = tempfile::tempdir().unwrap();
    let penchant = penchant_in(dir.path());

    // Its help says where the benchmarks are and how to build them.
    let out = run(&penchant, &["bench", "--help"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let help = text(&out.stdout);
    assert!(help.contains("penchant-bench"), "{help}");
    assert!(
        help.contains("cargo build --release -p penchant-bench"),
        "{help}"
    );

    // No `penchant-bench` beside it: a clear error, not a panic.
    let out = run(&penchant, &["bench", "store", "--rows", "10"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&dir.path().join("penchant-bench").display().to_string()),
        "{stderr}"
    );
    assert!(
        stderr.contains("cargo build --release -p penchant-bench"),
        "{stderr}"
    );

    // A stand-in that prints its arguments, one a line, and exits 3.
    let stand_in = dir.path().join("penchant-bench");
    std::fs::write(&stand_in, "#!/bin/sh\nprintf '%s\\n' \"$@\"\nexit 3\n").unwrap();
    std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).unwrap();
    let args = [
        "store",
        "--rows",
        "10",
        "--no-sync",
        "-x",
        "--help",
        "a b",
        "--",
        "",
    ];
    let out = run(&penchant, &[&["bench"][..], &args].concat());
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("{}\n", args.join("\n")));

    // No arguments: the bench gets none (and prints its own usage).
    let out = run(&penchant, &["bench"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "\n");
}

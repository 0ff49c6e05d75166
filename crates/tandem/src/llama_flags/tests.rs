use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};

use super::*;
use crate::cli::{expand_short_aliases, Cli, Command as Sub};
use crate::serve::ServeArgs;

/// `tandem serve ARGS` as `main` reads it, with `env` as the environment.
fn parse(args: &[&str], env: &[(&str, &str)]) -> (Result<Cli, clap::Error>, Vec<String>) {
    let mut cmd = Cli::command();
    cmd.build();
    let serve = cmd.find_subcommand("serve").unwrap();
    let args = expand_short_aliases(args.iter().map(|s| s.to_string()));
    let env = |k: &str| {
        env.iter()
            .find(|(name, _)| *name == k)
            .map(|(_, v)| v.to_string())
    };
    let (rest, warnings) = prepare(serve, args, &env);
    let line = ["tandem".to_string(), "serve".to_string()]
        .into_iter()
        .chain(rest);
    (Cli::try_parse_from(line), warnings)
}

fn serve(args: &[&str], env: &[(&str, &str)]) -> (ServeArgs, Vec<String>) {
    let (cli, warnings) = parse(args, env);
    match cli.unwrap_or_else(|e| panic!("{args:?}: {e}")).command {
        Sub::Serve(a) => (*a, warnings),
        _ => unreachable!(),
    }
}

#[test]
fn every_spelling_of_every_llama_server_flag_parses() {
    let mut cmd = Cli::command();
    cmd.build();
    let serve = cmd.find_subcommand("serve").unwrap();
    for flag in LLAMA_SERVER_FLAGS {
        for name in flag.names {
            let implemented = flag.implemented(serve, flag.negates(name)).is_some();
            let mut args = vec![*name];
            args.extend(std::iter::repeat_n("1", flag.values()));
            let (cli, warnings) = parse(&args, &[]);
            if let Err(e) = &cli {
                assert!(
                    !matches!(
                        e.kind(),
                        ErrorKind::UnknownArgument | ErrorKind::TooManyValues
                    ),
                    "{args:?}: {e}"
                );
            }
            let ignored = warnings.iter().any(|w| w.starts_with(&format!("{name}:")));
            assert_eq!(ignored, !implemented, "{name}: {warnings:?}");
            assert!(implemented || cli.is_ok(), "{name}");
        }
    }
}

#[test]
fn flags_tandem_lacks_are_taken_out_with_their_values_and_named() {
    let (a, w) = serve(
        &[
            "--prio",
            "-1",
            "--threads-http",
            "100",
            "-c",
            "256",
            "--control-vector-layer-range",
            "1",
            "2",
            "--mirostat-lr=0.1",
            "-n",
            "7",
        ],
        &[],
    );
    assert_eq!(a.model.ctx_size, 256);
    assert_eq!(a.n_predict, 7);
    assert_eq!(w.len(), 4, "{w:?}");
    for name in [
        "--prio",
        "--threads-http",
        "--control-vector-layer-range",
        "--mirostat-lr",
    ] {
        assert!(
            w.iter().any(|l| l.starts_with(&format!("{name}:"))),
            "{name}: {w:?}"
        );
    }
}

#[test]
fn other_spellings_of_implemented_flags_are_its_own() {
    let (a, w) = serve(
        &[
            "--predict",
            "9",
            "--temperature",
            "0.5",
            "-ngl",
            "0",
            "--n_gpu_layers",
            "1",
        ],
        &[],
    );
    assert_eq!((a.n_predict, a.temp), (9, 0.5));
    assert_eq!(
        a.n_gpu_layers.as_deref(),
        Some("1"),
        "the last one given, as llama-server"
    );
    assert!(w.is_empty(), "{w:?}");
}

#[test]
fn unknown_flags_are_still_refused() {
    let (cli, _) = parse(&["--no-such-flag"], &[]);
    assert_eq!(
        cli.err().map(|e| e.kind()),
        Some(ErrorKind::UnknownArgument)
    );
}

#[test]
fn environment_variables_set_the_flags_the_line_does_not() {
    let env = [
        ("LLAMA_ARG_CTX_SIZE", "333"),
        ("LLAMA_ARG_N_PREDICT", "5"),
        ("LLAMA_ARG_ENDPOINT_METRICS", "1"),
        ("LLAMA_ARG_THREADS_HTTP", "64"),
        ("LLAMA_ARG_CACHE_RAM", "64"),
    ];
    let (a, w) = serve(&["-n", "11"], &env);
    assert_eq!(a.cache_ram, 64, "an implemented flag's variable");
    assert_eq!(a.model.ctx_size, 333);
    assert_eq!(
        a.n_predict, 11,
        "the command line wins over the environment"
    );
    assert!(a.metrics);
    assert!(
        w.iter().any(|l| l.starts_with("LLAMA_ARG_THREADS_HTTP:")),
        "{w:?}"
    );
    let (a, _) = serve(&[], &[("LLAMA_ARG_ENDPOINT_METRICS", "0")]);
    assert!(!a.metrics);
    let (a, _) = serve(&[], &[("LLAMA_ARG_NO_KV_UNIFIED", "1")]);
    assert!(!a.kv_unified);
    let (a, _) = serve(&[], &[("LLAMA_ARG_KV_UNIFIED", "true")]);
    assert!(a.kv_unified);
}

#[test]
fn repeated_list_flags_still_add_up() {
    let (a, _) = serve(
        &[
            "--api-key",
            "a",
            "--api-key",
            "b,c",
            "--cors-origins",
            "x",
            "--cors-origins",
            "y",
        ],
        &[],
    );
    assert_eq!(a.api_key, ["a", "b", "c"]);
    assert_eq!(a.cors_origins, ["x", "y"]);
}

#[test]
fn llama_device_names_choose_the_backend() {
    let device = |v: &str| serve(&["-dev", v], &[]).0.model.device;
    assert_eq!(device("none"), engine::DeviceKind::Cpu);
    assert_eq!(device("Vulkan0"), engine::DeviceKind::Gpu);
    assert_eq!(device("CUDA0,CUDA1"), engine::DeviceKind::Gpu);
    let (cli, _) = parse(&["-dev", "Vulkan0,floppy"], &[]);
    assert!(cli.is_err());
}

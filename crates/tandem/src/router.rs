//! `tandem serve` as a router of several models (`--models-dir`, `--models-preset`, or `-m`
//! given more than once): the command line split into the router's own settings (address,
//! CORS, limits, the web UI) and the flags every model's server gets (the rest, the API keys
//! included: requests reach the models' servers with the client's key).

use clap::{Command, CommandFactory};

use crate::access::{allowed_hosts, api_keys};
use crate::serve::ServeArgs;
use crate::{pull, CliError};

/// Whether the command line asks for a router.
pub fn wanted(a: &ServeArgs) -> bool {
    a.models_dir.is_some() || a.models_preset.is_some() || !a.router_models.is_empty()
}

/// Flags of the router alone: its models, address, keys and HTTP limits.
const ROUTER_ONLY: &[&str] = &[
    "-m",
    "--model",
    "--router-model",
    "--models-dir",
    "--models-preset",
    "--models-max",
    "--no-models-autoload",
    "--host",
    "--port",
    "-a",
    "--alias",
    "--tags",
    "--allowed-hosts",
    "--cors-origins",
    "--cors-methods",
    "--cors-headers",
    "--cors-credentials",
    "--no-cors-credentials",
    "--webui",
    "--no-webui",
    "--max-connections",
    "--timeout-header",
    "--timeout-body",
];

fn is_model_flag(a: &str) -> bool {
    a == "-m" || a == "--model" || a.starts_with("--model=")
}

/// `serve`'s arguments with a `-m` given more than once written as `--router-model`, each.
pub fn rewrite_models(args: &mut [String]) {
    if args.iter().filter(|a| is_model_flag(a)).count() < 2 {
        return;
    }
    for a in args.iter_mut() {
        if a == "-m" || a == "--model" {
            *a = "--router-model".into();
        } else if let Some(v) = a.strip_prefix("--model=") {
            *a = format!("--router-model={v}");
        }
    }
}

/// `args` (serve's, after `llama_flags::prepare`) without the router's own flags.
fn model_args(cmd: &Command, args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (name, inline) = match a.split_once('=') {
            Some((n, _)) if n.starts_with("--") => (n, true),
            _ => (a.as_str(), false),
        };
        let takes = match a.starts_with('-') {
            true => crate::llama_flags::known(cmd, name).unwrap_or(0),
            false => 0,
        };
        let values: Vec<&String> = match inline {
            true => Vec::new(),
            false => it.by_ref().take(takes).collect(),
        };
        if !ROUTER_ONLY.contains(&name) {
            out.push(a.clone());
            out.extend(values.into_iter().cloned());
        }
    }
    out
}

/// A `-m` of a router: a known model's name (pulled if missing) or a file, and its name.
fn named(
    arg: &str,
    dir: Option<&std::path::Path>,
) -> Result<(String, std::path::PathBuf), CliError> {
    let path = pull::resolve(arg, dir)?;
    let name = match pull::known(arg) {
        Some(m) => m.name.to_string(),
        None => path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or(arg)
            .to_string(),
    };
    Ok((name, path))
}

/// Serves the router until SIGINT or SIGTERM.
pub fn execute(a: ServeArgs) -> Result<(), CliError> {
    let mut cli = crate::cli::Cli::command();
    cli.build();
    let serve = cli.find_subcommand("serve").expect("serve is a subcommand");
    let args = crate::arguments().split_off(2);
    let given = a
        .router_models
        .iter()
        .map(|m| named(m, a.model.cache.dir.as_deref()))
        .collect::<Result<Vec<_>, _>>()?;
    let keys = api_keys(&a.api_key, a.api_key_file.as_deref())?;
    let keyed = !keys.is_empty();
    let engine = engine::EngineConfig {
        n_ctx: a.model.ctx_size,
        n_parallel: a.parallel,
        kv_unified: a.kv_unified,
        n_batch: a.batch,
        n_ubatch: a.model.ubatch,
        n_threads: 1,
        kv_type: a.model.cache_type,
        queue_limit: a.queue_limit,
        device: engine::DeviceKind::Cpu,
        step_budget: a.step_budget,
        swa_full: a.model.swa_full,
        ctx_checkpoints: a.model.ctx_checkpoints,
        cache_ram_mib: a.cache_ram,
        cache_dir: None,
    };
    let place = a.models_dir.clone().unwrap_or_default();
    let config = server::ServerConfig {
        host: a.host.clone(),
        port: a.port,
        allowed_hosts: allowed_hosts(&a.host, &a.allowed_hosts),
        api_keys: keys,
        cors: a.cors(keyed),
        body_limit: a.body_limit,
        limits: a.limits()?,
        webui: !a.no_webui,
        ..server::ServerConfig::new(place, engine)
    };
    let settings = server::fleet::FleetSettings {
        sources: server::fleet::Sources {
            given,
            dir: a.models_dir.clone(),
            preset: a.models_preset.clone(),
        },
        exe: std::env::current_exe()
            .map_err(|e| CliError::Usage(format!("cannot find tandem's own binary: {e}")))?,
        args: model_args(serve, &args),
        max: a.models_max.max(1),
        autoload: !a.no_models_autoload,
    };
    server::fleet::run(config, settings)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_models_servers_get_every_flag_but_the_routers() {
        let mut cli = crate::cli::Cli::command();
        cli.build();
        let serve = cli.find_subcommand("serve").unwrap();
        let args = strings(&[
            "--models-dir",
            "/m",
            "--port",
            "8080",
            "-c",
            "2048",
            "--api-key",
            "k",
            "--temp",
            "0.5",
            "--host=0.0.0.0",
            "--metrics",
            "--models-max",
            "2",
            "--no-webui",
        ]);
        let kept = ["-c", "2048", "--api-key", "k", "--temp", "0.5", "--metrics"];
        assert_eq!(model_args(serve, &args), strings(&kept));
        let mut repeated = strings(&["-m", "a", "--model=b", "-c", "1"]);
        rewrite_models(&mut repeated);
        assert_eq!(
            repeated,
            strings(&["--router-model", "a", "--router-model=b", "-c", "1"])
        );
        let mut once = strings(&["-m", "a"]);
        rewrite_models(&mut once);
        assert_eq!(once, strings(&["-m", "a"]));
    }
}

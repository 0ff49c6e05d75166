//! Who may reach a server (`serve` and the router alike): its API keys and the `Host`
//! names it answers.

use crate::CliError;

/// The keys of `--api-key` and `--api-key-file`. An empty or blank key (`--api-key "$KEY"`
/// with KEY unset), or one with whitespace around it (which no client could send), is an
/// error: starting without the authentication asked for is never silent.
pub fn api_keys(given: &[String], file: Option<&std::path::Path>) -> Result<Vec<String>, CliError> {
    let mut keys: Vec<(String, String)> = given
        .iter()
        .map(|k| (k.clone(), "--api-key".to_string()))
        .collect();
    if let Some(path) = file {
        let text = std::fs::read_to_string(path).map_err(|e| CliError::io(path, e))?;
        let keys_in = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
        for (i, line) in keys_in {
            keys.push((
                line.to_string(),
                format!("line {} of {}", i + 1, path.display()),
            ));
        }
        if !keys.iter().any(|(_, from)| from.starts_with("line ")) {
            return Err(CliError::Usage(format!(
                "--api-key-file {} holds no key; refusing to start without authentication",
                path.display()
            )));
        }
    }
    for (key, from) in &keys {
        if key.trim().is_empty() {
            return Err(CliError::Usage(format!(
                "{from} gives an empty API key; refusing to start without authentication (leave --api-key out to run without keys)"
            )));
        }
        if key.trim() != key {
            return Err(CliError::Usage(format!(
                "{from} gives an API key with whitespace around it, which no client could send; remove the whitespace"
            )));
        }
    }
    Ok(keys.into_iter().map(|(k, _)| k).collect())
}

/// `--allowed-hosts`, or its default for the addresses `hosts` the server binds
/// (comma-separated): the loopback names when every one is a loopback address, else any.
pub fn allowed_hosts(hosts: &str, given: &[String]) -> Option<Vec<String>> {
    if given.iter().any(|h| h == "*") {
        return None;
    }
    if !given.is_empty() {
        return Some(given.to_vec());
    }
    let mut allowed = Vec::new();
    for host in hosts.split(',').map(str::trim) {
        let loopback = host == "localhost"
            || host
                .trim_matches(|c| c == '[' || c == ']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if !loopback {
            return None;
        }
        allowed.push(if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_string()
        });
    }
    for name in ["localhost", "127.0.0.1", "[::1]"] {
        if !allowed.iter().any(|a| a == name) {
            allowed.push(name.into());
        }
    }
    Some(allowed)
}

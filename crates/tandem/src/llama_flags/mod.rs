//! llama-server's whole command line on `tandem serve`: the flags tandem implements are its own
//! (clap), every other flag llama-server lists is accepted with one warning naming it, and
//! `LLAMA_ARG_*` environment variables stand for the flags they name, as in llama-server.

mod table;

use clap::Command;
pub use table::LLAMA_SERVER_FLAGS;

/// How many values follow a flag. llama.cpp's parser always takes them, also where its help
/// writes the value in brackets (`-fa [on|off|auto]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    None,
    One,
    Two,
}

/// One row of llama-server's `--help`: all spellings of a flag.
#[derive(Debug)]
pub struct LlamaFlag {
    pub names: &'static [&'static str],
    pub arity: Arity,
    pub env: Option<&'static str>,
}

impl LlamaFlag {
    fn values(&self) -> usize {
        match self.arity {
            Arity::None => 0,
            Arity::One => 1,
            Arity::Two => 2,
        }
    }

    /// Whether `name` turns the flag off: llama-server lists a boolean's negative spellings
    /// (`-nkvo`, `--no-kv-offload`) after its last positive long one.
    fn negates(&self, name: &str) -> bool {
        let last_positive = self
            .names
            .iter()
            .rposition(|n| n.starts_with("--") && !n.starts_with("--no-"));
        let at = self.names.iter().position(|n| *n == name);
        matches!((last_positive, at), (Some(p), Some(i)) if i > p)
    }

    /// The first spelling of the given sense that `cmd` implements.
    fn implemented(&self, cmd: &Command, negative: bool) -> Option<(&'static str, usize)> {
        self.names
            .iter()
            .filter(|n| self.negates(n) == negative)
            .find_map(|n| known(cmd, n).map(|t| (*n, t)))
    }
}

fn lookup(name: &str) -> Option<&'static LlamaFlag> {
    LLAMA_SERVER_FLAGS.iter().find(|f| f.names.contains(&name))
}

/// Whether `cmd` (after `expand_short_aliases`) takes `name`, and how many values it takes.
pub(crate) fn known(cmd: &Command, name: &str) -> Option<usize> {
    cmd.get_arguments().find_map(|a| {
        let takes = if a.get_action().takes_values() {
            a.get_num_args().map_or(1, |r| r.min_values().max(1))
        } else {
            0
        };
        let hit = match name.strip_prefix("--") {
            Some(long) => {
                a.get_long() == Some(long)
                    || a.get_all_aliases().is_some_and(|al| al.contains(&long))
            }
            None => {
                let mut c = name.strip_prefix('-')?.chars();
                let short = c.next()?;
                c.next().is_none()
                    && (a.get_short() == Some(short)
                        || a.get_all_short_aliases()
                            .is_some_and(|al| al.contains(&short)))
            }
        };
        hit.then_some(takes)
    })
}

/// llama.cpp's truthy values for a boolean flag's environment variable.
fn truthy(v: &str) -> bool {
    matches!(
        v.to_ascii_lowercase().as_str(),
        "1" | "true" | "on" | "yes" | "enabled"
    )
}

/// The arguments after `serve` with llama-server's flags that `cmd` does not implement taken
/// out (each with its values), other spellings of the flags it does implement written as its
/// own (`--predict` as `-n`), and `LLAMA_ARG_*` variables of `env` for flags the line does not
/// set added as those flags. A long flag's `_` are read as `-` (`--backend_sampling`), as
/// llama.cpp reads them. Returns the arguments and one warning per flag taken out. Flags
/// unknown to llama-server are left for clap to refuse.
pub fn prepare(
    cmd: &Command,
    args: Vec<String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> (Vec<String>, Vec<String>) {
    let mut kept = Vec::with_capacity(args.len());
    let mut warnings = Vec::new();
    let mut given: Vec<&'static LlamaFlag> = Vec::new();
    let mut it = args.into_iter();
    while let Some(mut arg) = it.next() {
        if !arg.starts_with('-') || arg == "-" || arg == "--" {
            kept.push(arg);
            continue;
        }
        let (mut name, inline) = match arg.split_once('=') {
            Some((n, _)) if n.starts_with("--") => (n.to_string(), 1),
            _ => (arg.clone(), 0),
        };
        if name.starts_with("--") && name.contains('_') && known(cmd, &name).is_none() {
            let dashed = name.replace('_', "-");
            arg = arg.replacen(&name, &dashed, 1);
            name = dashed;
        }
        let flag = lookup(&name);
        given.extend(flag);
        let spelling = known(cmd, &name).map(|t| (name.clone(), t)).or_else(|| {
            let f = flag?;
            f.implemented(cmd, f.negates(&name))
                .map(|(n, t)| (n.to_string(), t))
        });
        match (spelling, flag) {
            (Some((spelled, takes)), _) => {
                kept.push(if spelled == name {
                    arg
                } else {
                    arg.replacen(&name, &spelled, 1)
                });
                for _ in inline..takes {
                    kept.extend(it.next());
                }
            }
            (None, Some(f)) => {
                for _ in inline..f.values() {
                    it.next();
                }
                warnings.push(format!(
                    "{name}: a llama-server flag tandem does not implement; ignored"
                ));
            }
            (None, None) => kept.push(arg),
        }
    }
    for f in LLAMA_SERVER_FLAGS {
        let Some(var) = f.env else { continue };
        if given.iter().any(|g| std::ptr::eq(*g, f)) {
            continue;
        }
        let negated = var.replacen("LLAMA_ARG_", "LLAMA_ARG_NO_", 1);
        let (value, negative) = match (env(var), env(&negated)) {
            (_, Some(_)) if f.arity == Arity::None => (String::new(), true),
            (Some(v), _) => (v.clone(), f.arity == Arity::None && !truthy(&v)),
            (None, _) => continue,
        };
        match f.implemented(cmd, negative) {
            Some((name, _)) => {
                kept.push(name.to_string());
                match f.arity {
                    Arity::None => {}
                    Arity::One => kept.push(value),
                    Arity::Two => kept.extend(value.split_whitespace().map(str::to_string)),
                }
            }
            None if negative && f.implemented(cmd, false).is_some() => {}
            None => warnings.push(format!(
                "{var}: sets a llama-server flag tandem does not implement; ignored"
            )),
        }
    }
    (kept, warnings)
}

#[cfg(test)]
mod tests;

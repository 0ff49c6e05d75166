//! [`Node`] trees → Lark text, deciding which rules and runs can be terminals.

use std::collections::{HashMap, HashSet};

use super::parse::Parser;
use super::Node;

/// What the emitter needs to know of a regular expression: the code points its strings can
/// start with, whether it matches the empty string, and whether it is prefix-free (no
/// string it matches is a proper prefix of another). llguidance's lexer is greedy, so only
/// a prefix-free terminal ends where GBNF's character-level parse would let it end.
#[derive(Debug, Clone, Default)]
struct Info {
    first: Vec<(u32, u32)>,
    nullable: bool,
    prefix_free: bool,
}

fn info(first: Vec<(u32, u32)>, nullable: bool, prefix_free: bool) -> Info {
    Info {
        first,
        nullable,
        prefix_free,
    }
}

pub(super) struct Emitter {
    /// Lowercase Lark name of each rule id; its terminal form is the name uppercased.
    names: Vec<String>,
    /// Of each rule emitted as a terminal (the others keep the default).
    infos: Vec<Info>,
    used: HashSet<String>,
    /// Hoisted terminals by body, and the definitions not yet written.
    hoisted: HashMap<String, String>,
    pending: Vec<String>,
}

impl Emitter {
    pub(super) fn new(p: &Parser, bodies: &[Node]) -> Self {
        let bases: Vec<String> = p.names.iter().map(|n| base_name(n)).collect();
        let mut e = Emitter {
            names: Vec::new(),
            infos: vec![Info::default(); bodies.len()],
            used: bases.iter().cloned().chain(["start".to_owned()]).collect(),
            hoisted: HashMap::new(),
            pending: Vec::new(),
        };
        // Least fixpoint: a rule becomes a terminal only once every rule it references has,
        // so recursive rules never do, and `info` finds the referenced infos ready.
        let mut changed = true;
        while changed {
            changed = false;
            for (id, body) in bodies.iter().enumerate().rev() {
                let info = e.info(body);
                if info.prefix_free && !e.infos[id].prefix_free {
                    e.infos[id] = info;
                    changed = true;
                }
            }
        }
        let mut seen = HashSet::new();
        for b in bases {
            let name = if seen.insert(b.clone()) {
                b
            } else {
                e.fresh(&b)
            };
            e.names.push(name);
        }
        e
    }

    fn fresh(&mut self, prefix: &str) -> String {
        (1..)
            .map(|k| format!("{prefix}_{k}"))
            .find(|n| self.used.insert(n.clone()))
            .unwrap_or_default()
    }

    pub(super) fn emit(mut self, p: &Parser, bodies: &[Node]) -> String {
        let root = p.ids.get("root").copied().unwrap_or_default();
        let mut out = format!("start: {}\n", self.reference(root));
        for &id in &p.order {
            let owner = (!self.infos[id].prefix_free).then_some(id);
            let text = self.expr(&bodies[id], owner);
            out += &format!("{}: {text}\n", self.reference(id));
            out.extend(self.pending.drain(..));
        }
        out
    }

    /// The Lark name of rule `id`. A prefix-free node only references prefix-free rules,
    /// so terminals never reference a rule.
    fn reference(&self, id: usize) -> String {
        if self.infos[id].prefix_free {
            self.names[id].to_ascii_uppercase()
        } else {
            self.names[id].clone()
        }
    }

    fn info(&self, n: &Node) -> Info {
        match n {
            Node::Lit(s) => {
                let first = s.chars().take(1).map(|c| (c as u32, c as u32)).collect();
                info(first, s.is_empty(), true)
            }
            Node::Class(false, r) => info(
                r.iter().map(|&(a, b)| (a as u32, b as u32)).collect(),
                false,
                true,
            ),
            Node::Class(true, r) => info(complement(r), false, true),
            Node::Any => info(vec![(0, 0x10FFFF)], false, true),
            Node::Token(_) => Info::default(),
            Node::Ref(id) => self.infos[*id].clone(),
            Node::Seq(v) => {
                let items: Vec<Info> = v.iter().map(|c| self.info(c)).collect();
                let mut out = info(Vec::new(), true, true);
                for (i, item) in items.iter().enumerate() {
                    if out.nullable {
                        out.first.extend(&item.first);
                    }
                    out.nullable &= item.nullable;
                    out.prefix_free &= self.ends_cleanly(v, &items, i);
                }
                out
            }
            Node::Alt(v) => {
                let items: Vec<Info> = v.iter().map(|c| self.info(c)).collect();
                let disjoint = items.iter().enumerate().all(|(i, a)| {
                    !a.nullable
                        && a.prefix_free
                        && items[..i].iter().all(|b| !overlap(&a.first, &b.first))
                });
                let first = items.iter().flat_map(|i| i.first.iter().copied()).collect();
                info(first, items.iter().any(|i| i.nullable), disjoint)
            }
            Node::Rep(c, min, max) => {
                let inner = self.info(c);
                let fixed = *max == Some(*min) || *max == Some(0);
                info(
                    inner.first,
                    *min == 0 || inner.nullable,
                    inner.prefix_free && fixed,
                )
            }
        }
    }

    /// Whether item `i` of a sequence ends where a prefix-free terminal would: it is
    /// prefix-free, or it repeats a prefix-free piece and the next item cannot start like it
    /// (`[^"]* "\""`, `[0-9]+ "."`).
    fn ends_cleanly(&self, v: &[Node], items: &[Info], i: usize) -> bool {
        if items[i].prefix_free {
            return true;
        }
        let (Node::Rep(c, ..), Some(next)) = (&v[i], items.get(i + 1)) else {
            return false;
        };
        let inner = self.info(c);
        inner.prefix_free
            && !inner.nullable
            && next.prefix_free
            && !next.nullable
            && !overlap(&inner.first, &next.first)
    }

    /// `n` in Lark syntax: inside rule `owner` (prefix-free regular pieces hoisted into
    /// terminals), or inside a terminal.
    fn expr(&mut self, n: &Node, owner: Option<usize>) -> String {
        match n {
            Node::Lit(s) => lark_string(s),
            Node::Class(true, r) if r.is_empty() => "/(?s:.)/".to_owned(),
            Node::Class(negated, r) => {
                let items: String = r
                    .iter()
                    .map(|&(lo, hi)| match lo == hi {
                        true => class_char(lo),
                        false => format!("{}-{}", class_char(lo), class_char(hi)),
                    })
                    .collect();
                format!("/[{}{items}]/", if *negated { "^" } else { "" })
            }
            Node::Any => "/(?s:.)/".to_owned(),
            Node::Token(t) => t.clone(),
            Node::Ref(id) => self.reference(*id),
            Node::Seq(v) if v.is_empty() => "\"\"".to_owned(),
            Node::Seq(v) => {
                let items: Vec<Info> = v.iter().map(|c| self.info(c)).collect();
                let (mut parts, mut i) = (Vec::new(), 0);
                while i < v.len() {
                    let run = match owner {
                        Some(_) => (i..v.len())
                            .take_while(|&j| self.ends_cleanly(v, &items, j))
                            .count(),
                        None => 0,
                    };
                    if run >= 2 {
                        parts.push(self.hoist(&Node::Seq(v[i..i + run].to_vec()), owner));
                        i += run;
                    } else {
                        parts.push(self.child(&v[i], owner, 1));
                        i += 1;
                    }
                }
                parts.join(" ")
            }
            Node::Alt(v) => {
                let parts: Vec<String> = v.iter().map(|c| self.child(c, owner, 0)).collect();
                parts.join(" | ")
            }
            Node::Rep(c, min, max) => {
                let op = match (min, max) {
                    (_, Some(0)) => return "\"\"".to_owned(),
                    (0, None) => "*".to_owned(),
                    (1, None) => "+".to_owned(),
                    (0, Some(1)) => "?".to_owned(),
                    (m, None) => format!("{{{m},}}"),
                    (m, Some(n)) if m == n => format!("{{{m}}}"),
                    (m, Some(n)) => format!("{{{m},{n}}}"),
                };
                self.child(c, owner, 2) + &op
            }
        }
    }

    /// `n` as an alternative (`level` 0), a sequence item (1) or a repeated item (2).
    fn child(&mut self, n: &Node, owner: Option<usize>, level: u8) -> String {
        let (compound, wrap) = match n {
            Node::Alt(_) => (true, true),
            Node::Seq(v) => (v.len() > 1, level >= 1 && v.len() > 1),
            Node::Rep(..) => (true, level >= 2),
            _ => (false, false),
        };
        if owner.is_some() && compound && self.info(n).prefix_free {
            return self.hoist(n, owner);
        }
        let s = self.expr(n, owner);
        if wrap {
            format!("({s})")
        } else {
            s
        }
    }

    /// The name of a terminal matching the regular `n`, defined after rule `owner`.
    fn hoist(&mut self, n: &Node, owner: Option<usize>) -> String {
        let body = self.expr(n, None);
        if let Some(name) = self.hoisted.get(&body) {
            return name.clone();
        }
        let prefix = self.names[owner.unwrap_or_default()].clone();
        let name = self.fresh(&prefix).to_ascii_uppercase();
        self.pending.push(format!("{name}: {body}\n"));
        self.hoisted.insert(body, name.clone());
        name
    }
}

fn overlap(a: &[(u32, u32)], b: &[(u32, u32)]) -> bool {
    a.iter().any(|x| b.iter().any(|y| x.0 <= y.1 && y.0 <= x.1))
}

/// The code points outside `ranges`.
fn complement(ranges: &[(char, char)]) -> Vec<(u32, u32)> {
    let mut r: Vec<(u32, u32)> = ranges.iter().map(|&(a, b)| (a as u32, b as u32)).collect();
    r.sort_unstable();
    let (mut out, mut next) = (Vec::new(), 0);
    for (a, b) in r {
        if a > next {
            out.push((next, a - 1));
        }
        next = next.max(b + 1);
    }
    if next <= 0x10FFFF {
        out.push((next, 0x10FFFF));
    }
    out
}

/// The Lark rule name for GBNF `name`: lowercase, `-` as `_`, `r_` before names that would
/// not start with a letter or would be `start`. Not injective by itself (`a-b`, `A_b`):
/// [`Emitter::new`] renames the later of two that collide.
fn base_name(name: &str) -> String {
    let s = name.to_ascii_lowercase().replace('-', "_");
    if s.starts_with(|c: char| c.is_ascii_lowercase()) && s != "start" {
        s
    } else {
        format!("r_{s}")
    }
}

/// A Lark string literal spelling `s`: JSON syntax, except that Lark also wants DEL escaped.
fn lark_string(s: &str) -> String {
    serde_json::Value::from(s)
        .to_string()
        .replace('\x7f', "\\u007f")
}

/// `c` inside a regex class between Lark's `/…/`.
fn class_char(c: char) -> String {
    match c {
        '\\' | ']' | '[' | '-' | '^' | '&' | '~' | '/' => format!("\\{c}"),
        '\n' => "\\n".to_owned(),
        '\r' => "\\r".to_owned(),
        '\t' => "\\t".to_owned(),
        c if c != ' ' && (c.is_control() || c.is_whitespace()) => format!("\\x{{{:x}}}", c as u32),
        c => c.to_string(),
    }
}

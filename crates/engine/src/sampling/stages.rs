//! The stages of the chain after the mask, each a function over the candidates
//! `(token, value)`: values are logits, divided by the temperature once that stage ran;
//! stages that need probabilities take the softmax of the current values, as llama.cpp's do.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// llama.cpp's repetition penalties over the last `last_n` tokens of the sequence.
///
/// A token seen `c > 0` times there has its logit `l` divided by `repeat` when positive and
/// multiplied by it when not, then lowered by `c · frequency + presence`. Example with
/// `repeat` 1.5, `frequency` 0.5, `presence` 1: a logit of 3.0 seen twice becomes
/// 3.0 / 1.5 − 2 · 0.5 − 1 = 0.0; a logit of −2.0 seen once becomes −3.0 − 0.5 − 1 = −4.5.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Penalties {
    /// How many of the last tokens count; `usize::MAX`: the whole sequence.
    pub last_n: usize,
    /// 1.0: off.
    pub repeat: f32,
    pub frequency: f32,
    pub presence: f32,
}

impl Default for Penalties {
    fn default() -> Self {
        Penalties {
            last_n: 64,
            repeat: 1.0,
            frequency: 0.0,
            presence: 0.0,
        }
    }
}

impl Penalties {
    /// Whether applying them can change a logit.
    pub fn is_active(&self) -> bool {
        self.last_n > 0 && (self.repeat != 1.0 || self.frequency != 0.0 || self.presence != 0.0)
    }

    /// Penalizes `logits` (`[n_vocab]`) for the tokens at the end of `history`.
    pub fn apply(&self, logits: &mut [f32], history: &[u32]) {
        let window = &history[history.len() - self.last_n.min(history.len())..];
        let mut counts: HashMap<u32, u32> = HashMap::with_capacity(window.len());
        for &t in window {
            *counts.entry(t).or_default() += 1;
        }
        for (&t, &c) in &counts {
            let Some(l) = logits.get_mut(t as usize) else {
                continue;
            };
            if *l <= 0.0 {
                *l *= self.repeat;
            } else {
                *l /= self.repeat;
            }
            *l -= c as f32 * self.frequency + self.presence;
        }
    }
}

/// One stage of the chain after the mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stage {
    Penalties,
    Dry,
    TopK,
    Typical,
    TopP,
    MinP,
    Temperature,
}

/// What a name in llama-server's `samplers` list stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Named {
    Stage(Stage),
    /// A llama.cpp stage tandem does not implement; it is inert at its default setting,
    /// which is the only one tandem accepts.
    Inert,
}

impl Stage {
    /// A stage by its llama-server name (`top_k`, `typ_p`, ...); `None`: unknown.
    pub fn from_name(name: &str) -> Option<Named> {
        Some(match name {
            "penalties" => Named::Stage(Stage::Penalties),
            "dry" => Named::Stage(Stage::Dry),
            "top_k" => Named::Stage(Stage::TopK),
            "typ_p" | "typical_p" | "typical" => Named::Stage(Stage::Typical),
            "top_p" => Named::Stage(Stage::TopP),
            "min_p" => Named::Stage(Stage::MinP),
            "temperature" | "temp" => Named::Stage(Stage::Temperature),
            "xtc" | "top_n_sigma" | "infill" => Named::Inert,
            _ => return None,
        })
    }

    /// Its name in llama-server's `samplers`.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Penalties => "penalties",
            Stage::Dry => "dry",
            Stage::TopK => "top_k",
            Stage::Typical => "typ_p",
            Stage::TopP => "top_p",
            Stage::MinP => "min_p",
            Stage::Temperature => "temperature",
        }
    }

    /// A stage by its llama-server letter (`e`, `d`, `k`, `y`, `p`, `m`, `t`); `None`: unknown.
    pub fn from_char(c: char) -> Option<Named> {
        Some(match c {
            'e' => Named::Stage(Stage::Penalties),
            'd' => Named::Stage(Stage::Dry),
            'k' => Named::Stage(Stage::TopK),
            'y' => Named::Stage(Stage::Typical),
            'p' => Named::Stage(Stage::TopP),
            'm' => Named::Stage(Stage::MinP),
            't' => Named::Stage(Stage::Temperature),
            'x' | 's' | 'i' => Named::Inert,
            _ => return None,
        })
    }
}

const N_STAGES: usize = 7;

/// The stages after the mask, in order, each at most once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    stages: [Stage; N_STAGES],
    len: u8,
}

impl Default for Order {
    /// llama.cpp's default order.
    fn default() -> Self {
        Order {
            stages: [
                Stage::Penalties,
                Stage::Dry,
                Stage::TopK,
                Stage::Typical,
                Stage::TopP,
                Stage::MinP,
                Stage::Temperature,
            ],
            len: N_STAGES as u8,
        }
    }
}

impl Order {
    /// The order `stages`, keeping the first of repeated ones.
    pub fn new(stages: impl IntoIterator<Item = Stage>) -> Order {
        let mut o = Order {
            stages: [Stage::Penalties; N_STAGES],
            len: 0,
        };
        for s in stages {
            if !o.has(s) {
                o.stages[o.len as usize] = s;
                o.len += 1;
            }
        }
        o
    }

    /// llama-server's `samplers` as names (`["top_k", "temperature"]`); llama.cpp's stages
    /// that tandem lacks are skipped (they are inert at the only settings accepted). An
    /// unknown name is returned as the error.
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Order, String> {
        let mut stages = Vec::new();
        for n in names {
            match Stage::from_name(n.trim()) {
                Some(Named::Stage(s)) => stages.push(s),
                Some(Named::Inert) => {}
                None => return Err(n.to_string()),
            }
        }
        Ok(Order::new(stages))
    }

    /// llama-server's `samplers` as letters (`"kypmt"`); an unknown letter is the error.
    pub fn from_chars(letters: &str) -> Result<Order, char> {
        let mut stages = Vec::new();
        for c in letters.chars() {
            match Stage::from_char(c) {
                Some(Named::Stage(s)) => stages.push(s),
                Some(Named::Inert) => {}
                None => return Err(c),
            }
        }
        Ok(Order::new(stages))
    }

    pub fn stages(&self) -> &[Stage] {
        &self.stages[..self.len as usize]
    }

    pub fn has(&self, s: Stage) -> bool {
        self.stages().contains(&s)
    }
}

fn by_value(a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// Sorts by decreasing value (ties by token id) unless already sorted.
pub(super) fn sort(c: &mut [(u32, f32)], sorted: &mut bool) {
    if !*sorted {
        c.sort_unstable_by(by_value);
        *sorted = true;
    }
}

/// Probabilities of the candidates' current values (sorted by decreasing value).
fn probs(c: &[(u32, f32)]) -> Vec<f64> {
    let max = c.first().map_or(0.0, |x| x.1);
    let e: Vec<f64> = c.iter().map(|x| ((x.1 - max) as f64).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.into_iter().map(|x| x / sum).collect()
}

pub(super) fn top_k(c: &mut Vec<(u32, f32)>, k: usize, sorted: &mut bool) {
    if k == 0 || k >= c.len() {
        return;
    }
    if !*sorted {
        c.select_nth_unstable_by(k - 1, by_value);
    }
    c.truncate(k);
    sort(c, sorted);
}

/// Keeps the most probable candidates whose probabilities sum to at least `p`.
pub(super) fn top_p(c: &mut Vec<(u32, f32)>, p: f32, sorted: &mut bool) {
    if p >= 1.0 {
        return;
    }
    sort(c, sorted);
    let mut cum = 0.0;
    let mut keep = c.len();
    for (i, q) in probs(c).into_iter().enumerate() {
        cum += q;
        if cum >= p as f64 {
            keep = i + 1;
            break;
        }
    }
    c.truncate(keep.max(1));
}

/// Keeps the candidates at least `p` times as probable as the most probable.
pub(super) fn min_p(c: &mut Vec<(u32, f32)>, p: f32, sorted: &mut bool) {
    if p <= 0.0 {
        return;
    }
    sort(c, sorted);
    let floor = c[0].1 + p.ln();
    let keep = c.iter().take_while(|x| x.1 >= floor).count();
    c.truncate(keep.max(1));
}

/// Locally typical sampling: keeps the candidates whose surprise `−ln q` is closest to the
/// distribution's entropy, until their probabilities sum to at least `p`.
pub(super) fn typical(c: &mut Vec<(u32, f32)>, p: f32, sorted: &mut bool) {
    if p >= 1.0 || c.len() < 2 {
        return;
    }
    sort(c, sorted);
    let q = probs(c);
    let entropy: f64 = q.iter().filter(|&&x| x > 0.0).map(|&x| -x * x.ln()).sum();
    let mut idx: Vec<usize> = (0..c.len()).collect();
    let shift = |i: usize| (-q[i].ln() - entropy).abs();
    idx.sort_by(|&a, &b| shift(a).total_cmp(&shift(b)).then(a.cmp(&b)));
    let mut cum = 0.0;
    let mut keep = idx.len();
    for (n, &i) in idx.iter().enumerate() {
        cum += q[i];
        if cum >= p as f64 {
            keep = n + 1;
            break;
        }
    }
    let kept: Vec<(u32, f32)> = idx[..keep].iter().map(|&i| c[i]).collect();
    *c = kept;
    *sorted = false;
}

pub(super) fn temperature(c: &mut [(u32, f32)], t: f32) {
    for x in c.iter_mut() {
        x.1 /= t;
    }
}

/// The candidates' values become their probabilities.
pub(super) fn softmax(c: &mut [(u32, f32)]) {
    let q = probs(c);
    for (x, q) in c.iter_mut().zip(q) {
        x.1 = q as f32;
    }
}
